import { ServerResponse } from 'node:http';

/** What was cut: a whole answer (JSON, problem+json, a page) or a stream of parts (SSE, multipart/mixed). */
export type CutKind = 'answer' | 'stream';

const STREAM_TYPES = /^(?:text\/event-stream|multipart\/)/i;

/**
 * Gives every response of an app a write deadline (P78): output that the client has not taken
 * within `ms` of being written (a write left above the buffer's high-water mark not drained, an ended
 * response not finished) ends the connection, and `onCut` is told. A client reading slowly then holds the
 * answer's memory for at most `ms`, and a stream whose reader stopped draining is cut rather than holding
 * its parts (and, for @defer/@stream, its admission units) for as long as the socket stays open. A reader
 * that keeps up, however slowly the parts come, is never cut: each write is judged on its own.
 *
 * Installed on the app's response prototype (`app.response`), so no request pays for it until a write is
 * left buffered; `ms` 0 installs nothing.
 */
export function writeDeadline(proto: ServerResponse, ms: number, onCut: (res: ServerResponse, kind: CutKind) => void): void {
  if (ms <= 0) return;
  const { write, end } = ServerResponse.prototype;
  const armed = new WeakSet<ServerResponse>();

  const arm = (res: ServerResponse): void => {
    if (armed.has(res)) return;
    armed.add(res);
    const settled = (): void => {
      clearTimeout(timer);
      armed.delete(res);
      res.removeListener('drain', settled);
      res.removeListener('finish', settled);
      res.removeListener('close', settled);
      // Drained, but an end written meanwhile has not been taken yet: its own deadline starts.
      if (res.writableEnded && !res.writableFinished && !res.destroyed) arm(res);
    };
    const timer = setTimeout(() => {
      settled();
      if (res.writableFinished || res.destroyed) return;
      const type = res.getHeader('content-type');
      onCut(res, typeof type === 'string' && STREAM_TYPES.test(type) ? 'stream' : 'answer');
      res.destroy();
    }, ms);
    // Never what keeps a shutting-down process alive: the shutdown closes connections itself.
    timer.unref();
    res.once('drain', settled);
    res.once('finish', settled);
    res.once('close', settled);
  };

  Object.defineProperties(proto, {
    write: {
      configurable: true,
      writable: true,
      value: function (this: ServerResponse, ...args: Parameters<ServerResponse['write']>): boolean {
        const ok = write.apply(this, args);
        if (!ok && !this.destroyed) arm(this);
        return ok;
      },
    },
    end: {
      configurable: true,
      writable: true,
      value: function (this: ServerResponse, ...args: Parameters<ServerResponse['end']>): ServerResponse {
        end.apply(this, args);
        if (!this.writableFinished && !this.destroyed && this.writableLength > 0) arm(this);
        return this;
      },
    },
  });
}
