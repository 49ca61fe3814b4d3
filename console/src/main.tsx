import './styles.css';
import './api/client';

import { render } from 'preact';

import { App } from './app';

render(<App />, document.getElementById('app') as HTMLElement);
