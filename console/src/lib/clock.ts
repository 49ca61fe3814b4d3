// The server's clock as seen from here: every API answer's `Date` header corrects for the
// difference, so times the server wrote (event `createdAt`) compare with "now" without trusting
// the browser's clock.
let offsetMs = 0;

export function observeServerDate(date: string | null): void {
  const t = date ? Date.parse(date) : NaN;
  // `Date` has whole seconds: keep the browser's clock when it is within one second.
  if (Number.isFinite(t) && Math.abs(t - Date.now()) > 1000) offsetMs = t - Date.now();
  else if (Number.isFinite(t)) offsetMs = 0;
}

export const serverNow = () => Date.now() + offsetMs;
