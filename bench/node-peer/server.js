'use strict';
// Node peer for bench/run.sh (contender "node-redis"): one single-threaded Node process,
// express + rate-limiter-flexible (RateLimiterRedis on an ioredis client) + http-proxy,
// in front of the bench's nginx upstream. The same never-rejecting limit as Sluice's
// sluice-limit-pass / sluice-redis, keyed by the client IP: 1e9 points per 1 s and 1e9 per
// 60 s (both fixed windows: rate-limiter-flexible has no sliding window), checked in Redis
// on every request. A Redis error forwards the request (like Sluice's on_error: allow); a
// rejection answers 429.
//
// env: PORT (listen on 127.0.0.1), UPSTREAM (http://127.0.0.1:PORT), REDIS_PORT (127.0.0.1),
//      LIMITERS=2 (1: only the 1 s limiter), AUTOPIPELINE=1 (ioredis enableAutoPipelining:
//      commands issued in one event-loop tick share one socket write; 0: one write each)
const http = require('http');
const express = require('express');
const httpProxy = require('http-proxy');
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const port = Number(process.env.PORT);
const upstream = process.env.UPSTREAM;
const redisPort = Number(process.env.REDIS_PORT);
const nLimiters = Number(process.env.LIMITERS || 2);
const autoPipeline = (process.env.AUTOPIPELINE || '1') !== '0';
if (!port || !upstream || !redisPort) {
  console.error('PORT, UPSTREAM and REDIS_PORT are required');
  process.exit(2);
}

const redis = new Redis({
  host: '127.0.0.1',
  port: redisPort,
  enableAutoPipelining: autoPipeline,
  enableOfflineQueue: true,
  maxRetriesPerRequest: 1,
});
redis.on('error', (e) => console.error('redis:', e.message));

const limiters = [
  new RateLimiterRedis({ storeClient: redis, keyPrefix: 'rl1s', points: 1e9, duration: 1 }),
  new RateLimiterRedis({ storeClient: redis, keyPrefix: 'rl60s', points: 1e9, duration: 60 }),
].slice(0, nLimiters);

const agent = new http.Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 256 });
const proxy = httpProxy.createProxyServer({ target: upstream, agent, xfwd: false });
proxy.on('error', (err, req, res) => {
  if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
  res.end('bad gateway\n');
});

const app = express();
app.disable('x-powered-by');
app.disable('etag');
app.use((req, res, next) => {
  const key = req.socket.remoteAddress;
  Promise.all(limiters.map((l) => l.consume(key))).then(
    () => next(),
    (rej) => {
      if (rej instanceof Error) return next(); // store error: fail open
      res.set('Retry-After', String(Math.ceil(rej.msBeforeNext / 1000)));
      res.status(429).type('text/plain').send('Too Many Requests\n');
    },
  );
});
app.use((req, res) => proxy.web(req, res));

const server = http.createServer({ keepAliveTimeout: 65000 }, app);
server.keepAliveTimeout = 65000;
server.headersTimeout = 66000;
redis.once('ready', () => {
  server.listen(port, '127.0.0.1', () => {
    console.error(`node peer listening on 127.0.0.1:${port} (limiters ${nLimiters}, autopipeline ${autoPipeline})`);
  });
});
const stop = () => { server.close(); redis.disconnect(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
