// API errors as the console shows them (CONTRACT: Conventions of the REST surface): the body is
// `{statusCode, error, message}`, where a 400's `message` is a list of problems that each start
// with the field they name ("name must be 1 to 100 characters", "qualities.1 must be one of …").

export class ApiError extends Error {
  /** HTTP status; 0 when no answer came (network down, server gone). */
  readonly status: number;
  /** Every problem, as the server worded it. */
  readonly messages: string[];

  constructor(status: number, messages: string[]) {
    super(messages.join('; '));
    this.name = 'ApiError';
    this.status = status;
    this.messages = messages;
  }

  get gone(): boolean {
    return this.status === 404;
  }
}

function messagesOf(status: number, body: unknown): string[] {
  if (body && typeof body === 'object' && 'message' in body) {
    const m = (body as { message: unknown }).message;
    if (Array.isArray(m)) return m.map(String);
    if (typeof m === 'string' && m) return [m];
  }
  if (typeof body === 'string' && body) return [body];
  if (status === 0) return ['The server could not be reached. Check your connection and try again.'];
  return [`The server answered ${status}.`];
}

type Outcome = { data?: unknown; error?: unknown; response?: Response };

/**
 * The data of a generated-client call, or an ApiError carrying the server's messages. Every call in
 * the console goes through here so that no error is silently dropped.
 */
export async function call<R extends Outcome>(pending: Promise<R>): Promise<Exclude<R['data'], undefined>> {
  let outcome: R;
  try {
    outcome = await pending;
  } catch (e) {
    throw new ApiError(0, messagesOf(0, e instanceof Error ? e.message : undefined));
  }
  // On a network failure the generated client leaves `response` undefined whatever its type says.
  const status = outcome.response?.status ?? 0;
  if (outcome.response?.ok && outcome.error === undefined) {
    return outcome.data as Exclude<R['data'], undefined>;
  }
  if (status === 429) {
    const after = outcome.response?.headers.get('Retry-After');
    throw new ApiError(429, [`Too many requests; try again${after ? ` in ${after} s` : ' shortly'}.`]);
  }
  throw new ApiError(status, messagesOf(status, outcome.error));
}

export function asApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  return new ApiError(0, [e instanceof Error ? e.message : String(e)]);
}

export interface SortedErrors {
  /** Messages keyed by the form field they name. */
  fields: Record<string, string[]>;
  /** Messages that name no field of the form. */
  general: string[];
}

/**
 * Puts each message beside the field it names: the message's first word, or its first path
 * segment (`qualities.1` → `qualities`, `ladder.0.name` → `ladder`). Anything else is general.
 */
export function sortErrors(error: ApiError, fields: readonly string[]): SortedErrors {
  const out: SortedErrors = { fields: {}, general: [] };
  for (const message of error.messages) {
    const first = message.split(/\s/, 1)[0] ?? '';
    const root = first.split(/[.[]/, 1)[0] ?? '';
    let field = fields.includes(first) ? first : fields.includes(root) ? root : null;
    // A conflict names its field inside the sentence ("a stream with this name exists"): when
    // exactly one field of the form appears as a word, the message goes beside it.
    if (!field && error.status === 409) {
      const named = fields.filter((f) => new RegExp(`\\b${f}\\b`).test(message));
      if (named.length === 1) field = named[0] ?? null;
    }
    if (field) (out.fields[field] ??= []).push(message);
    else out.general.push(message);
  }
  return out;
}
