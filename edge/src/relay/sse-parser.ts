/**
 * Incremental parser for a `text/event-stream` body: feed it decoded text as it arrives and it
 * returns the `data` payload of every event completed so far. Comments, `event:`, `id:` and
 * `retry:` fields are ignored; multi-line data is joined with "\n" as the SSE spec says.
 */
export class SseParser {
  #buffer = "";
  #data: string[] = [];
  #dataSize = 0;
  readonly #maxEventBytes: number;

  constructor(maxEventBytes = 4 << 20) {
    this.#maxEventBytes = maxEventBytes;
  }

  /** Adds text; returns the data of each event that a blank line completed. */
  push(text: string): string[] {
    this.#buffer += text;
    const events: string[] = [];
    let start = 0;
    for (;;) {
      const nl = this.#nextLineEnd(start);
      if (nl === -1) break;
      const line = this.#buffer.slice(start, nl.index);
      start = nl.index + nl.length;
      this.#line(line, events);
    }
    this.#buffer = this.#buffer.slice(start);
    if (this.#buffer.length + this.#dataSize > this.#maxEventBytes) {
      throw new SseTooLargeError();
    }
    return events;
  }

  /** Ends the stream; an event without its closing blank line is still delivered. */
  end(): string[] {
    const events: string[] = [];
    if (this.#buffer !== "") this.#line(this.#buffer, events);
    this.#buffer = "";
    this.#line("", events);
    return events;
  }

  #nextLineEnd(from: number): { index: number; length: number } | -1 {
    for (let i = from; i < this.#buffer.length; i++) {
      const c = this.#buffer.charCodeAt(i);
      if (c === 10) return { index: i, length: 1 };
      if (c === 13) {
        // A lone "\r" at the end may be the first half of "\r\n": wait for more text.
        if (i + 1 === this.#buffer.length) return -1;
        return { index: i, length: this.#buffer.charCodeAt(i + 1) === 10 ? 2 : 1 };
      }
    }
    return -1;
  }

  #line(line: string, events: string[]): void {
    if (line === "") {
      if (this.#data.length > 0) events.push(this.#data.join("\n"));
      this.#data = [];
      this.#dataSize = 0;
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    if (field !== "data") return;
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    this.#data.push(value);
    this.#dataSize += value.length;
  }
}

/** An event grew past the size limit: the upstream is misbehaving. */
export class SseTooLargeError extends Error {
  override name = "SseTooLargeError";
}
