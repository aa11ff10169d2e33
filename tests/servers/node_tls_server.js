// A TLS server with OpenSSL inside the node executable (tests/src/lib.rs `Node`).
// Node drives its handshakes through SSL_read/SSL_write on memory BIOs: the calls make
// no socket I/O of their own.
// Usage: node node_tls_server.js TLS_PORT PLAIN_PORT CERT KEY LOG
// LOG gets "remote-port protocol reused request-time-ms" per request, like the other
// test servers' access logs.
'use strict';
const fs = require('fs');
const http = require('http');
const https = require('https');

const [tlsPort, plainPort, cert, key, logPath] = process.argv.slice(2);
const log = fs.openSync(logPath, 'a');

function handler(req, res) {
  const start = process.hrtime.bigint();
  res.on('finish', () => {
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    const s = req.socket;
    const tls = typeof s.getProtocol === 'function';
    const protocol = tls ? s.getProtocol() : `HTTP/${req.httpVersion}`;
    const reused = tls && s.isSessionReused() ? 'r' : '.';
    fs.writeSync(log, `${s.remotePort} ${protocol} ${reused} ${ms.toFixed(3)}\n`);
  });
  res.end('ok\n');
}

const server = https.createServer(
  { cert: fs.readFileSync(cert), key: fs.readFileSync(key), ALPNProtocols: ['http/1.1'] },
  handler,
);
// TLS 1.2 resumption by session id: a server-side cache, as nginx's ssl_session_cache
const sessions = new Map();
server.on('newSession', (id, data, done) => {
  if (sessions.size >= 1000) sessions.delete(sessions.keys().next().value);
  sessions.set(id.toString('hex'), data);
  done();
});
server.on('resumeSession', (id, done) => done(null, sessions.get(id.toString('hex')) || null));
server.listen(Number(tlsPort), '127.0.0.1');
http.createServer(handler).listen(Number(plainPort), '127.0.0.1');
