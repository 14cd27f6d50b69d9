// Reads the rate-limit fields of the real gateway with an independent structured-field parser
// (the npm package structured-headers, RFC 8941/9651), as a client library would:
//   node check_fields.mjs SLUICE_BINARY UPSTREAM_BINARY
// Prints one line per check and a closing "N passed, N failed"; exits 1 on any failure.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseItem, parseList } from 'structured-headers';

const [sluiceBin, upstreamBin] = process.argv.slice(2);
if (!sluiceBin || !upstreamBin) {
  console.error('usage: node check_fields.mjs SLUICE_BINARY UPSTREAM_BINARY');
  process.exit(2);
}

let passed = 0, failed = 0;
function check(what, ok, detail = '') {
  if (ok) {
    passed++;
    console.log(`ok:   ${what}`);
  } else {
    failed++;
    console.log(`FAIL: ${what}${detail ? ': ' + detail : ''}`);
  }
}

const children = [];
// Starts a program and resolves with the port its output names on a line matching `re`.
function start(argv, re) {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no port from ${argv[0]} within 15 s:\n${out}`)), 15000);
    const read = (chunk) => {
      out += chunk;
      const m = out.match(re);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('exit', (code) => reject(new Error(`${argv[0]} exited (${code}):\n${out}`)));
  });
}

// The parameters of a list member as a plain object.
const params = (member) => Object.fromEntries(member[1]);
const names = (list) => list.map((m) => m[0]);

const dir = mkdtempSync(join(tmpdir(), 'sluice-sf-'));
try {
  const upstreamPort = await start([upstreamBin, '--listen', '127.0.0.1:0'], /listening on 127\.0\.0\.1:(\d+)/);
  const config = join(dir, 'sluice.yaml');
  writeFileSync(config, `server: { listen: "127.0.0.1:0", threads: 1 }
admin: { listen: "127.0.0.1:0" }
upstream: { url: "http://127.0.0.1:${upstreamPort}" }
log: { level: warn, access: { path: "off" } }
policies:
  p:
    ip: [ {limit: 3, per: 1h}, {limit: 4, per: 250ms, algorithm: fixed}, {concurrency: 5, lease: 10s} ]
  k:
    header:X-Tenant+ip: [ {limit: 5, per: 1h} ]
    query:a/b@c:d: [ {limit: 6, per: 1m} ]
routes:
  - { match: { path: /kinds }, policy: k }
  - { match: { path_prefix: / }, policy: p }
`);
  const port = await start([sluiceBin, '--config', config], /proxy listening on 127\.0\.0\.1:(\d+)/);

  const statuses = [];
  for (let i = 0; i < 4; i++) {
    const r = await fetch(`http://127.0.0.1:${port}/sf`);
    await r.arrayBuffer();
    statuses.push(r.status);
    const label = `request ${i + 1} (${r.status})`;

    let policy, limit;
    try {
      policy = parseList(r.headers.get('ratelimit-policy') ?? '');
      limit = parseList(r.headers.get('ratelimit') ?? '');
    } catch (e) {
      check(`${label}: RateLimit-Policy and RateLimit parse as structured-field lists`, false, String(e));
      continue;
    }
    check(`${label}: RateLimit-Policy names every tier`,
          JSON.stringify(names(policy)) === JSON.stringify(['ip-1h', 'ip-250ms', 'ip-concurrency']),
          JSON.stringify(names(policy)));
    const [hour, quarter, conc] = policy.map(params);
    check(`${label}: the hour's q=3;w=3600`, hour.q === 3 && hour.w === 3600, JSON.stringify(hour));
    check(`${label}: 250ms stated in whole seconds as q=16;w=1`, quarter.q === 16 && quarter.w === 1,
          JSON.stringify(quarter));
    check(`${label}: the concurrency tier has q=5 and qu, no w`,
          conc.q === 5 && conc.qu === 'concurrent-requests' && !('w' in conc), JSON.stringify(conc));
    check(`${label}: RateLimit has one item per tier`,
          JSON.stringify([...names(limit)].sort()) === JSON.stringify(['ip-1h', 'ip-250ms', 'ip-concurrency']),
          JSON.stringify(names(limit)));
    for (const m of limit) {
      const p = params(m);
      const rate = m[0] !== 'ip-concurrency';
      check(`${label}: ${m[0]} has an integer r${rate ? ' and t' : ' and no t'}`,
            Number.isInteger(p.r) && p.r >= 0 && (rate ? Number.isInteger(p.t) && p.t >= 0 : !('t' in p)),
            JSON.stringify(p));
    }
    const hourItem = params(limit.find((m) => m[0] === 'ip-1h'));
    if (r.status === 200) {
      check(`${label}: the hour's remaining counts down`, hourItem.r === 2 - i, JSON.stringify(hourItem));
    } else {
      check(`${label}: the refusing tier comes first`, limit[0][0] === 'ip-1h', JSON.stringify(names(limit)));
      let retry;
      try {
        retry = parseItem(r.headers.get('retry-after') ?? '')[0];
      } catch (e) {
        retry = String(e);
      }
      check(`${label}: Retry-After is an integer number of seconds, not past the hour`,
            Number.isInteger(retry) && retry > 0 && retry <= 3600, String(retry));
    }
  }
  check('three admitted, then 429', JSON.stringify(statuses) === JSON.stringify([200, 200, 200, 429]),
        JSON.stringify(statuses));

  // Other identifier kinds' tier names (their canonical text: ':', '+', '/', '@') are strings
  // a client reads back as written.
  const kinds = await fetch(`http://127.0.0.1:${port}/kinds?a/b@c:d=v`, { headers: { 'X-Tenant': 'acme' } });
  await kinds.arrayBuffer();
  try {
    const policy = parseList(kinds.headers.get('ratelimit-policy') ?? '');
    const limit = parseList(kinds.headers.get('ratelimit') ?? '');
    const expected = ['header:x-tenant+ip-1h', 'query:a/b@c:d-1m'];
    check('other kinds: RateLimit-Policy names them by their canonical text',
          JSON.stringify(names(policy)) === JSON.stringify(expected), JSON.stringify(names(policy)));
    check('other kinds: RateLimit has the same names', JSON.stringify([...names(limit)].sort()) === JSON.stringify(expected),
          JSON.stringify(names(limit)));
    check('other kinds: q and w as for ip', params(policy[0]).q === 5 && params(policy[1]).w === 60,
          JSON.stringify(policy.map(params)));
  } catch (e) {
    check('other kinds: RateLimit-Policy and RateLimit parse as structured-field lists', false, String(e));
  }
} catch (e) {
  check('the gateway and the upstream ran', false, String(e));
} finally {
  for (const c of children) c.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
