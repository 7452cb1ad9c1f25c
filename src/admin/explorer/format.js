// ferrobus explorer: values formatted for reading, and the page's elements built and updated
// in place.

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

export const plural = (count, word) => `${count} ${word}${count === 1 ? "" : "s"}`;

export function formatBytes(bytes) {
  if (bytes === undefined || bytes === null) return "";
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = -1;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

export function formatRate(rate) {
  if (rate === undefined || rate === null) return "–";
  if (rate === 0) return "0";
  if (rate < 10) return rate.toFixed(1);
  return String(Math.round(rate));
}

const pad = (number, width = 2) => String(number).padStart(width, "0");

export function formatTime(text) {
  if (!text) return "";
  const at = new Date(text);
  if (Number.isNaN(at.getTime())) return text;
  return (
    `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ` +
    `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`
  );
}

export function valueText(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}

/** A rule's SQL text and, when it has some, the values of its `@parameters`. */
export function withParameters(text, parameters) {
  if (!Array.isArray(parameters) || parameters.length === 0) return text;
  const values = parameters.map((parameter) => `${parameter.name} = ${parameter.value} (${parameter.type})`);
  return `${text} — with ${values.join(", ")}`;
}

export function setText(element, text) {
  const value = text === undefined || text === null ? "" : String(text);
  if (element.textContent !== value) element.textContent = value;
}

export function element(tag, attributes = {}, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "className") node.className = value;
    else node.setAttribute(name, value);
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Puts one row per item into `tbody`, in order, reusing rows by key. */
export function syncRows(tbody, items, keyOf, create, update) {
  const existing = new Map();
  for (const row of Array.from(tbody.rows)) existing.set(row.dataset.key, row);
  let cursor = tbody.firstElementChild;
  for (const item of items) {
    const key = String(keyOf(item));
    let row = existing.get(key);
    if (row) existing.delete(key);
    else {
      row = create(item);
      row.dataset.key = key;
    }
    update(row, item);
    if (row !== cursor) tbody.insertBefore(row, cursor);
    else cursor = cursor.nextElementSibling;
  }
  for (const row of existing.values()) row.remove();
}
