// The JSON routes of `rag serve`, by URLs relative to the page (so a path prefix in front of
// the server keeps working).
import { readEvents } from "./sse.js";

/** A failed request: the server's {"error"} message, its status, and its JSON body. */
export class ApiError extends Error {
  constructor(message, status, body = {}) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

function url(path, params = {}) {
  const target = new URL(path, document.baseURI);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") target.searchParams.set(key, value);
  }
  return target;
}

/**
 * The rag_csrf cookie's value ("" when there is none). A page signed in with a token (its session
 * cookie) repeats it in X-CSRF-Token on every POST, which a page of another site cannot do.
 */
export function csrfToken() {
  const found = document.cookie.split("; ").find((part) => part.startsWith("rag_csrf="));
  return found ? decodeURIComponent(found.slice("rag_csrf=".length)) : "";
}

async function jsonBody(response) {
  try {
    return await response.json();
  } catch {
    return {};
  }
}

/** GET a JSON route; ApiError on a non-2xx answer. */
export async function getJSON(path, params = {}, signal = undefined) {
  const response = await fetch(url(path, params), { headers: { Accept: "application/json" }, signal });
  const body = await jsonBody(response);
  if (!response.ok) throw new ApiError(body.error || `${path} answered ${response.status}`, response.status, body);
  return body;
}

/**
 * POST /ask and stream its answer: onEvent(name, data) for each server-sent event
 * (sources, token, done, error). A refusal before streaming (400, 403, 404, 502) is an
 * ApiError whose body may still carry the sources (502).
 */
export async function ask(request, onEvent, signal = undefined) {
  const response = await fetch(url("ask"), {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream", "X-CSRF-Token": csrfToken() },
    body: JSON.stringify({ ...request, stream: true }),
    signal,
  });
  const type = response.headers.get("Content-Type") || "";
  if (!response.ok) {
    const body = await jsonBody(response);
    // An older `rag serve` has no /ask: its 404 is about a route, not about the question.
    const message = response.status === 404
      ? "this server has no /ask route (chat is not available here)"
      : body.error || `/ask answered ${response.status}`;
    throw new ApiError(message, response.status, body);
  }
  if (!type.includes("text/event-stream")) {
    // A server that answered JSON anyway: replay it as the events a stream would have sent.
    const body = await jsonBody(response);
    const retrieval = body.retrieval || {};
    onEvent("sources", { ...retrieval, abstained: body.abstained, sources: retrieval.sources || body.sources || [] });
    onEvent("done", body);
    return;
  }
  for await (const { event, data } of readEvents(response.body)) onEvent(event, data);
}
