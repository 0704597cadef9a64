// Server-sent events read from a fetch() response body. EventSource cannot POST, and /ask
// takes the question in a JSON body, so the stream is parsed here (the WHATWG format:
// "event:" and "data:" lines, an empty line ends an event; "data:" lines join with "\n").

/** Yield {event, data} for each event of a ReadableStream of UTF-8 bytes; data is parsed JSON when it parses. */
export async function* readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = eventEnd(buffer)) !== null) {
        const block = buffer.slice(0, end.index);
        buffer = buffer.slice(end.index + end.length);
        const event = parseBlock(block);
        if (event) yield event;
      }
    }
    const last = parseBlock(buffer);  // a stream may end without the final blank line
    if (last) yield last;
  } finally {
    reader.releaseLock();
  }
}

function eventEnd(buffer) {
  const match = /\r\n\r\n|\n\n|\r\r/.exec(buffer);
  return match ? { index: match.index, length: match[0].length } : null;
}

function parseBlock(block) {
  let event = "message";
  const data = [];
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (!line || line.startsWith(":")) continue;  // a comment (keep-alive)
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  const text = data.join("\n");
  try {
    return { event, data: JSON.parse(text) };
  } catch {
    return { event, data: text };
  }
}
