/**
 * PostGraphile 5's packages declare node >= 22 and, of what Node 22 added, call only
 * `Promise.withResolvers` (checked for postgraphile 5.1.5, grafast 1.1.3, @dataplan/pg 1.1.2). The
 * service runs on Node 20, and the peer runs on the same Node so that the comparison is of the servers,
 * not the runtimes: this adds the one missing function. Imported before PostGraphile; a no-op on Node 22.
 */
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers() {
    let resolve;
    let reject;
    const promise = new this((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}
