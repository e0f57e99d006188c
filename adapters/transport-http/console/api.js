// Rill console: the REST client. Every call carries the session's JWT; a 401 ends the session
// (the app sends the user to log in and back), a 403 becomes a message naming the refusal,
// and a request that never reaches the server marks the connection lost until one does.

const SESSION_KEY = 'rill.session';
const listeners = { expired: () => {}, connection: () => {} };

/** An API failure with what a person needs: `kind` is 'expired', 'forbidden', 'offline',
 * 'invalid' or 'server'; `field` names the form field at fault, when known. */
export class ApiError extends Error {
  constructor(kind, message, { status = 0, code = '', id = 0, field = null } = {}) {
    super(message);
    this.kind = kind;
    this.status = status;
    this.code = code;
    this.id = id;
    this.field = field;
  }
}

export function onExpired(handler) {
  listeners.expired = handler;
}

export function onConnection(handler) {
  listeners.connection = handler;
}

export function session() {
  try {
    return JSON.parse(sessionStorage.getItem(SESSION_KEY) || 'null');
  } catch {
    return null;
  }
}

export function saveSession(value) {
  if (value) sessionStorage.setItem(SESSION_KEY, JSON.stringify(value));
  else sessionStorage.removeItem(SESSION_KEY);
}

/** JSON with integers beyond 2^53 (u64 sizes, u128 ids) kept exact as BigInt. */
export function parseJson(text) {
  return JSON.parse(text, (key, value, context) =>
    (typeof value === 'number' && !Number.isSafeInteger(value) && context && /^\d+$/.test(context.source)
      ? BigInt(context.source) : value));
}

/** Which field of a form an error code is about, for the codes that name one. */
function fieldOf(code) {
  if (/username/.test(code)) return 'username';
  if (/password/.test(code)) return 'password';
  if (/name/.test(code)) return 'name';
  if (/partition/.test(code)) return 'partitions_count';
  return null;
}

function refusal(document) {
  const reason = document && document.reason ? ` (${document.reason})` : '';
  return `Permission denied: your user is not allowed to do this${reason}. Ask an administrator for the permission.`;
}

/** `method path [body]` against the REST API; resolves to the parsed reply (null for 204). */
export async function api(method, path, body, { anonymous = false, raw = false } = {}) {
  const headers = {};
  const current = session();
  if (!anonymous && current) headers.authorization = `Bearer ${current.token}`;
  let payload;
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    payload = typeof body === 'string' ? body : JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, { method, headers, body: payload, cache: 'no-store' });
  } catch {
    listeners.connection(false);
    throw new ApiError('offline', 'The connection to the server is lost. Retrying…');
  }
  listeners.connection(true);
  const text = await response.text();
  let document = null;
  try {
    document = text ? parseJson(text) : null;
  } catch {
    document = raw ? text : null;
  }
  if (response.ok) return raw ? text : document;
  const code = (document && document.code) || '';
  const details = { status: response.status, code, id: document && document.id, field: fieldOf(code) };
  if (response.status === 401 && !anonymous) {
    saveSession(null);
    listeners.expired();
    throw new ApiError('expired', 'Your session has expired. Log in again to continue.', details);
  }
  if (response.status === 403) throw new ApiError('forbidden', refusal(document), details);
  const reason = (document && document.reason) || text || response.statusText;
  const kind = response.status >= 500 ? 'server' : 'invalid';
  throw new ApiError(kind, `${reason}${code ? ` [${code}]` : ''}`, details);
}

/** Base64 of bytes, and back. */
export function toBase64(bytes) {
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

export function fromBase64(text) {
  const binary = atob(text || '');
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** A path segment for a stream, topic or group identifier. */
export function seg(value) {
  return encodeURIComponent(String(value));
}
