// The admin console's requests: GETs as the search page makes them (api.js), and POSTs that
// always declare JSON and carry the CSRF token of the login cookie when there is one.
import { ApiError, getJSON } from "./api.js";

export { ApiError, getJSON };

const CSRF_COOKIE = "rag_csrf";

/** The value of the rag_csrf cookie (set at login), or null on a loopback session without one. */
export function csrfToken() {
  const entry = document.cookie.split(";").map((c) => c.trim()).find((c) => c.startsWith(`${CSRF_COOKIE}=`));
  return entry ? decodeURIComponent(entry.slice(CSRF_COOKIE.length + 1)) : null;
}

/** POST a JSON body to a route relative to the page; the JSON answer, or ApiError with the server's message. */
export async function postJSON(path, body) {
  const headers = { "Content-Type": "application/json", Accept: "application/json" };
  const token = csrfToken();
  if (token) headers["X-CSRF-Token"] = token;
  const response = await fetch(new URL(path, document.baseURI), {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  let data = {};
  try {
    data = await response.json();
  } catch {
    data = {};
  }
  if (!response.ok) throw new ApiError(data.error || `${path} answered ${response.status}`, response.status, data);
  return data;
}
