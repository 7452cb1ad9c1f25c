// ferrobus explorer: the call of the JSON API under api/ (contract: docs/explorer.md), and
// its errors.

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function queryString(query) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") params.set(name, String(value));
  }
  const text = params.toString();
  return text ? "?" + text : "";
}

export async function api(method, route, { query, body } = {}) {
  const init = { method, headers: { Accept: "application/json" }, cache: "no-store", credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch("api/" + route + queryString(query), init);
  } catch (error) {
    throw new ApiError(0, `The broker does not answer (${error.message}).`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    let message = data && typeof data.error === "string" ? data.error : `${response.status} ${response.statusText}`;
    if (response.status === 401 && !(data && data.error)) message = "401 Unauthorized: the explorer needs a key name and key.";
    throw new ApiError(response.status, message);
  }
  return data;
}
