// Rill console: DOM building, formatting and the form, dialog and notice helpers every page
// uses. Text always goes in through textContent, never as markup, so nothing a stream name
// or a payload holds can run in the page.

/** An element: `h('a', {href: '#/x', class: 'link'}, 'text', child)`. */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
    else if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key in node && typeof value !== 'string') node[key] = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Empties `node` and puts `children` in. */
export function replace(node, ...children) {
  node.replaceChildren();
  for (const child of children.flat(Infinity)) if (child) node.append(child);
}

const U64_MAX = '18446744073709551615';

/** True for the u64 the server uses for "unlimited" (it arrives as a BigInt). */
export function isUnlimited(value) {
  return String(value) === U64_MAX;
}

export function fmtNumber(value) {
  if (typeof value === 'bigint') return value.toLocaleString('en-US');
  return Number(value || 0).toLocaleString('en-US', { maximumFractionDigits: 1 });
}

export function fmtBytes(value) {
  if (isUnlimited(value)) return 'unlimited';
  let n = Number(value || 0);
  const units = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];
  let unit = 0;
  while (n >= 1000 && unit < units.length - 1) {
    n /= 1000;
    unit += 1;
  }
  return `${unit === 0 ? n : n.toFixed(n < 10 ? 2 : 1)} ${units[unit]}`;
}

/** Microseconds since the epoch, as local ISO-like text. */
export function fmtTime(us) {
  const n = Number(us || 0);
  if (!n) return '—';
  const date = new Date(n / 1000);
  return Number.isNaN(date.getTime()) ? String(us) : date.toISOString().replace('T', ' ').replace('Z', ' UTC');
}

/** Microseconds as a duration ("1 h 5 min", "never" for 0/unlimited as the server says). */
export function fmtDuration(us, zero = 'server default') {
  if (isUnlimited(us)) return 'never';
  let s = Number(us || 0) / 1e6;
  if (!s) return zero;
  const parts = [];
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]]) {
    if (s >= size) {
      parts.push(`${Math.floor(s / size)} ${unit}`);
      s %= size;
    }
  }
  return parts.join(' ') || `${Number(us) / 1000} ms`;
}

/** A short in-page message: kind is 'error', 'ok' or 'info'. */
export function notice(kind, text) {
  return h('div', { class: `notice notice-${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

/** A modal yes/no question; resolves true only on the confirming button. */
export function confirmDialog(question, confirmLabel = 'Delete') {
  return new Promise((resolve) => {
    const dialog = h('dialog', { class: 'confirm' });
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.append(
      h('p', { text: question }),
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'secondary', onclick: () => done(false) }, 'Cancel'),
        h('button', { type: 'button', class: 'danger', id: 'confirm-yes', onclick: () => done(true) }, confirmLabel)),
    );
    dialog.addEventListener('cancel', () => done(false));
    document.body.append(dialog);
    dialog.showModal();
  });
}

/**
 * A form from field specs: `{name, label, type ('text'|'number'|'password'|'select'|
 * 'checkbox'|'textarea'), value, options: [[value, label]], required, check(value) -> error
 * text or ''}`. `submit(values)` may throw an error with a `field`: its text is shown
 * under that field, anything else above the button. Returns the form element.
 */
export function form(id, fields, submitLabel, submit) {
  const errors = new Map();
  const inputs = new Map();
  const general = h('div', { class: 'form-error', role: 'alert' });
  const node = h('form', { id, class: 'form', novalidate: true });
  for (const field of fields) {
    let input;
    if (field.type === 'select') {
      input = h('select', { name: field.name }, field.options.map(([value, label]) =>
        h('option', { value, selected: String(value) === String(field.value ?? '') }, label)));
    } else if (field.type === 'textarea') {
      input = h('textarea', { name: field.name, rows: field.rows || 4, placeholder: field.placeholder || '' });
      input.value = field.value ?? '';
    } else {
      input = h('input', { name: field.name, type: field.type || 'text', placeholder: field.placeholder || '' });
      if (field.type === 'checkbox') input.checked = Boolean(field.value);
      else input.value = field.value ?? '';
    }
    const error = h('div', { class: 'field-error', 'data-for': field.name });
    inputs.set(field.name, input);
    errors.set(field.name, error);
    const label = h('label', { class: field.type === 'checkbox' ? 'check' : '' },
      field.type === 'checkbox' ? [input, ' ', field.label] : [h('span', { text: field.label }), input]);
    node.append(h('div', { class: 'field' }, label, field.hint ? h('small', { text: field.hint }) : null, error));
  }
  const button = h('button', { type: 'submit' }, submitLabel);
  node.append(general, h('div', { class: 'actions' }, button));
  node.addEventListener('submit', async (event) => {
    event.preventDefault();
    for (const error of errors.values()) error.textContent = '';
    general.textContent = '';
    const values = {};
    let bad = false;
    for (const field of fields) {
      const input = inputs.get(field.name);
      const value = field.type === 'checkbox' ? input.checked : input.value.trim();
      values[field.name] = value;
      const problem = field.required && value === '' ? `${field.label} is required`
        : (field.check ? field.check(value, values) : '');
      if (problem) {
        errors.get(field.name).textContent = problem;
        input.setAttribute('aria-invalid', 'true');
        bad = true;
      } else input.removeAttribute('aria-invalid');
    }
    if (bad) return;
    button.disabled = true;
    try {
      await submit(values, node);
    } catch (error) {
      const slot = error.field && errors.get(error.field);
      (slot || general).textContent = error.message || String(error);
    } finally {
      button.disabled = false;
    }
  });
  return node;
}

/** A table: `columns` are `[heading, row => cell]`. */
export function table(columns, rows, attrs = {}) {
  return h('table', attrs,
    h('thead', {}, h('tr', {}, columns.map(([heading]) => h('th', { text: heading })))),
    h('tbody', {}, rows.map((row) => h('tr', {}, columns.map(([, cell]) => h('td', {}, cell(row)))))));
}

/** Field checks shared by the forms. */
export const checks = {
  name: (value) => (value.length > 255 ? 'Name must be at most 255 characters' : ''),
  whole: (label, min = 0, max = 2 ** 32 - 1) => (value) => {
    if (value === '') return '';
    if (!/^\d+$/.test(value)) return `${label} must be a whole number`;
    const n = Number(value);
    return n < min || n > max ? `${label} must be between ${min} and ${max}` : '';
  },
};

/** A console link: `#path?query`, empty query values left out. */
export function link(path, query = {}) {
  const search = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== undefined && v !== '')).toString();
  return `#${path}${search ? `?${search}` : ''}`;
}
