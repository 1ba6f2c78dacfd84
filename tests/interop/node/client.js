'use strict';
// Drives zigcorn's interop app (tests/apps/interop.py) with the clients Node programs
// really use: the built-in http2 module (h2c with prior knowledge, h2 over TLS), the
// built-in https module (HTTP/1.1 over TLS with a keep-alive Agent) and the npm package
// `ws` (WebSocket over ws:// and wss://).
//
// Each run does one check over one transport and prints one JSON line saying what it saw.
// Any failure is a message on stderr and exit status 1; bad usage is exit status 2.
//
//   node client.js CHECK --transport T --port PORT [--ca ca.pem] [--n N] [--size BYTES] [--timeout SECONDS]
//
// HTTP checks (transports h2c, h2, https): reuse, concurrent, echo, download.
// WebSocket checks (transports ws, wss): ws-text, ws-binary, ws-ping, ws-close.

const crypto = require('node:crypto');
const fs = require('node:fs');
const http2 = require('node:http2');
const https = require('node:https');
const { parseArgs } = require('node:util');
const WebSocket = require('ws');

const MIB = 1 << 20;
const PERIOD = 251; // the /download body: byte i is i % 251
const PATTERN = Buffer.from(Array.from({ length: PERIOD * 512 }, (_, i) => i % PERIOD));

class Failure extends Error {}

function fail(message) {
  throw new Failure(message);
}

// ---- HTTP: one target per transport --------------------------------------------------

// A client set up as a Node program would for that transport. request() opens one request
// and returns its writable side and a promise of the response head.
class Target {
  constructor(o) {
    this.o = o;
    this.ca = o.ca ? fs.readFileSync(o.ca) : undefined;
    this.events = []; // session-level happenings worth showing when something fails
    this.localPorts = new Set(); // one per TCP connection a request went out on
    this.wantVersion = o.transport === 'https' ? '1.1' : '2';
  }

  async open() {
    const { transport, port } = this.o;
    if (transport === 'https') {
      this.agent = new https.Agent({ keepAlive: true, ca: this.ca });
      return;
    }
    const authority = transport === 'h2' ? `https://localhost:${port}` : `http://127.0.0.1:${port}`;
    this.session = http2.connect(authority, transport === 'h2' ? { ca: this.ca } : {});
    this.session.on('goaway', (code, lastStreamID, data) =>
      this.events.push(`GOAWAY code ${code} last stream ${lastStreamID} ${data && data.length ? data.toString() : ''}`));
    this.session.on('error', (err) => this.events.push(`session error: ${err.message}`));
    this.session.on('frameError', (type, code, id) =>
      this.events.push(`frame error: type ${type} code ${code} stream ${id}`));
    await new Promise((resolve, reject) => {
      this.session.once('connect', resolve);
      this.session.once('error', reject);
    });
    const want = transport === 'h2' ? 'h2' : 'h2c';
    if (this.session.alpnProtocol !== want) fail(`the session speaks ${this.session.alpnProtocol}, want ${want}`);
  }

  close() {
    if (this.session) this.session.close();
    if (this.agent) this.agent.destroy();
  }

  // Opens METHOD path: returns {req, response}, where req takes the body (write/end) and
  // response resolves to {status, headers, body (a readable stream), reused}.
  request(method, path, headers = {}) {
    if (this.session) {
      const req = this.session.request({ ':method': method, ':path': path, ...headers });
      this.localPorts.add(this.session.socket.localPort);
      const response = new Promise((resolve, reject) => {
        req.once('response', (head) =>
          // Every stream after the session's first (id 1) reuses its connection.
          resolve({ status: head[':status'], headers: head, body: req, reused: req.id > 1 }));
        req.once('error', reject);
        req.once('close', () => reject(new Error(`stream closed before the response (RST_STREAM code ${req.rstCode})`)));
      });
      return { req, response };
    }
    const req = https.request({ host: 'localhost', port: this.o.port, method, path, headers, agent: this.agent });
    const response = new Promise((resolve, reject) => {
      req.once('response', (res) => {
        this.localPorts.add(req.socket.localPort);
        resolve({ status: res.statusCode, headers: res.headers, body: res, reused: req.reusedSocket });
      });
      req.once('error', reject);
    });
    return { req, response };
  }

  // The response head, which must be a 200 from the app over the transport's HTTP version.
  async expect200(what, response) {
    const res = await response.catch((err) => fail(`${what}: ${err.message}${this.trail()}`));
    if (res.status !== 200) fail(`${what}: status ${res.status}, want 200`);
    if (res.headers['x-http-version'] !== this.wantVersion) {
      fail(`${what}: the app saw HTTP/${res.headers['x-http-version']}, want HTTP/${this.wantVersion}`);
    }
    return res;
  }

  async getHello() {
    const { req, response } = this.request('GET', '/hello');
    req.end();
    const res = await this.expect200('GET /hello', response);
    const body = Buffer.concat(await readAll(res.body)).toString();
    if (body !== 'hello') fail(`GET /hello: body ${JSON.stringify(body)}, want "hello"`);
    return res;
  }

  trail() {
    return this.events.length ? ` (${this.events.join('; ')})` : '';
  }
}

// Reads a response body to its end, chunk by chunk into onChunk (or into a list it returns).
function readAll(body, onChunk) {
  const chunks = [];
  return new Promise((resolve, reject) => {
    let ended = false;
    body.on('data', (chunk) => (onChunk ? onChunk(chunk) : chunks.push(chunk)));
    body.once('end', () => {
      ended = true;
      resolve(chunks);
    });
    body.once('error', reject);
    body.once('aborted', () => reject(new Error('the response was aborted')));
    body.once('close', () => {
      const reset = body.rstCode ? ` (RST_STREAM code ${body.rstCode})` : '';
      if (!ended) reject(new Error(`the body closed before its end${reset}`));
    });
  });
}

// Resolves once `length` bytes of body have arrived (and hands them over); the stream stays
// open for readAll to finish.
function readExactly(body, length) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let got = 0;
    const onData = (chunk) => {
      chunks.push(chunk);
      got += chunk.length;
      if (got >= length) {
        body.pause();
        body.off('data', onData);
        const all = Buffer.concat(chunks);
        if (all.length > length) body.unshift(all.subarray(length));
        resolve(all.subarray(0, length));
      }
    };
    body.on('data', onData);
    body.once('error', reject);
    body.once('end', () => got < length && reject(new Error(`the body ended after ${got} of ${length} bytes`)));
  });
}

// n sequential GET /hello, every one after the first on the first one's connection.
async function checkReuse(t, o) {
  for (let i = 0; i < o.n; i++) {
    const res = await t.getHello();
    if (i > 0 && !res.reused) fail(`request ${i + 1} of ${o.n} did not reuse the connection`);
  }
  if (t.localPorts.size !== 1) fail(`${o.n} requests went out on ${t.localPorts.size} connections, want 1`);
  return { requests: o.n, connections: t.localPorts.size };
}

// n POST /echo open at once: each sends a line, reads its echo, then waits until every
// request has got that far before ending its body. Over HTTP/2 they are streams of the one
// session GET /hello opened; over HTTP/1.1 each has a connection of its own.
async function checkConcurrent(t, o) {
  await t.getHello();
  let arrived = 0;
  let openGate;
  const gate = new Promise((resolve) => (openGate = resolve));
  const one = async (i) => {
    const line = Buffer.from(`stream ${i}\n`);
    const { req, response } = t.request('POST', '/echo', { 'content-type': 'application/octet-stream' });
    req.write(line);
    const res = await t.expect200(`request ${i + 1} of ${o.n}`, response);
    const echoed = await readExactly(res.body, line.length);
    if (!echoed.equals(line)) {
      fail(`request ${i + 1}: echo ${JSON.stringify(echoed.toString())}, want ${JSON.stringify(line.toString())}`);
    }
    if (++arrived === o.n) openGate();
    await gate;
    const rest = readAll(res.body);
    res.body.resume();
    req.end();
    const tail = Buffer.concat(await rest);
    if (tail.length) fail(`request ${i + 1}: ${tail.length} bytes after the echo, want none`);
  };
  const results = await Promise.allSettled(Array.from({ length: o.n }, (_, i) => one(i)));
  const failed = results.filter((r) => r.status === 'rejected');
  if (failed.length) {
    fail(`${failed.length} of ${o.n} requests failed, ${arrived} were open at once; ` +
      `first: ${failed[0].reason.message}${t.trail()}`);
  }
  // Over HTTP/1.1 one of them reuses the warm-up's idle connection.
  const connections = t.localPorts.size;
  const want = t.session ? 1 : o.n;
  if (connections !== want) fail(`${o.n} requests open at once went out on ${connections} connections, want ${want}`);
  return { requests: o.n, open_at_once: arrived, connections };
}

// POST /echo of `size` random bytes, the echo compared by SHA-256 as it streams back.
async function checkEcho(t, o) {
  const data = crypto.randomBytes(o.size);
  const sent = crypto.createHash('sha256').update(data).digest('hex');
  const { req, response } = t.request('POST', '/echo', {
    'content-type': 'application/octet-stream',
    'content-length': String(o.size),
  });
  req.end(data);
  const res = await t.expect200('POST /echo', response);
  const digest = crypto.createHash('sha256');
  let received = 0;
  await readAll(res.body, (chunk) => {
    digest.update(chunk);
    received += chunk.length;
  }).catch((err) => fail(`POST /echo: after ${received} bytes: ${err.message}${t.trail()}`));
  const got = digest.digest('hex');
  if (received !== o.size || got !== sent) {
    fail(`POST /echo: got ${received} bytes with sha256 ${got}, sent ${o.size} with ${sent}`);
  }
  return { bytes: received, sha256: got };
}

// GET /download?n=SIZE, every chunk checked against the pattern as it arrives and hashed;
// nothing holds the body whole.
async function checkDownload(t, o) {
  const path = `/download?n=${o.size}`;
  const { req, response } = t.request('GET', path);
  req.end();
  const res = await t.expect200(`GET ${path}`, response);
  if (res.headers['content-length'] !== String(o.size)) {
    fail(`GET ${path}: content-length ${res.headers['content-length']}, want ${o.size}`);
  }
  const digest = crypto.createHash('sha256');
  let offset = 0;
  let reads = 0;
  let bad;
  await readAll(res.body, (chunk) => {
    reads++;
    if (bad === undefined) bad = mismatch(chunk, offset);
    digest.update(chunk);
    offset += chunk.length;
  }).catch((err) => fail(`GET ${path}: after ${offset} bytes: ${err.message}${t.trail()}`));
  if (bad !== undefined) fail(`GET ${path}: byte ${bad.at} is ${bad.got}, want ${bad.want}`);
  if (offset !== o.size) fail(`GET ${path}: the body ended after ${offset} bytes, want ${o.size}`);
  return { bytes: offset, reads, sha256: digest.digest('hex') };
}

// The first byte of chunk (which starts at body offset `offset`) that is not the pattern's.
function mismatch(chunk, offset) {
  const span = PATTERN.length - PERIOD;
  for (let i = 0; i < chunk.length; i += span) {
    const part = chunk.subarray(i, i + span);
    const start = (offset + i) % PERIOD;
    if (!part.equals(PATTERN.subarray(start, start + part.length))) {
      const j = part.findIndex((b, k) => b !== (offset + i + k) % PERIOD);
      return { at: offset + i + j, got: part[j], want: (offset + i + j) % PERIOD };
    }
  }
  return undefined;
}

// ---- WebSocket ------------------------------------------------------------------------

// A connected `ws` client and a queue of what it receives.
class Socket {
  constructor(o) {
    this.url = o.transport === 'wss' ? `wss://localhost:${o.port}/ws` : `ws://127.0.0.1:${o.port}/ws`;
    this.ws = new WebSocket(this.url, o.transport === 'wss' ? { ca: fs.readFileSync(o.ca) } : {});
    this.waiting = [];
    this.received = [];
    this.ws.on('message', (data, isBinary) => this.deliver({ kind: 'message', data, isBinary }));
    this.ws.on('pong', (data) => this.deliver({ kind: 'pong', data }));
    this.ws.on('close', (code, reason) => this.deliver({ kind: 'close', code, reason: reason.toString() }));
    this.ws.on('error', (err) => this.deliver({ kind: 'error', err }));
  }

  open() {
    return new Promise((resolve, reject) => {
      this.ws.once('open', resolve);
      this.ws.once('error', (err) => reject(new Failure(`connecting to ${this.url}: ${err.message}`)));
    });
  }

  deliver(event) {
    const waiter = this.waiting.shift();
    if (waiter) waiter(event);
    else this.received.push(event);
  }

  // The next thing that happens, which must be of `kind`.
  async next(kind) {
    const event = this.received.length ? this.received.shift() : await new Promise((r) => this.waiting.push(r));
    if (event.kind === kind) return event;
    if (event.kind === 'error') fail(`waiting for a ${kind}: ${event.err.message}`);
    if (event.kind === 'close') {
      fail(`waiting for a ${kind}: the server closed with ${event.code} ${JSON.stringify(event.reason)}`);
    }
    fail(`waiting for a ${kind}, got a ${event.kind}`);
  }

  // Closes with 1000 and returns the server's answering close.
  async close() {
    this.ws.close(1000, 'done');
    return this.next('close');
  }

  summary() {
    return { extensions: this.ws.extensions };
  }
}

async function checkWsText(s) {
  const text = 'hello ünïcødé ✓ 𝄞';
  s.ws.send(text);
  const { data, isBinary } = await s.next('message');
  if (isBinary || data.toString() !== text) {
    fail(`echo of text ${JSON.stringify(text)}: ${isBinary ? 'binary' : 'text'} ${JSON.stringify(data.toString())}`);
  }
  await s.close();
  return { text: data.toString() };
}

async function checkWsBinary(s) {
  const payload = crypto.randomBytes(MIB);
  s.ws.send(payload);
  const { data, isBinary } = await s.next('message');
  if (!isBinary) fail('the echo of a binary message came back as text');
  if (!data.equals(payload)) fail(`the echo of ${payload.length} bytes differs: ${data.length} bytes came back`);
  await s.close();
  return { bytes: data.length, sha256: crypto.createHash('sha256').update(data).digest('hex') };
}

async function checkWsPing(s) {
  const payload = Buffer.from('ping from node');
  s.ws.ping(payload);
  const { data } = await s.next('pong');
  if (!data.equals(payload)) fail(`pong ${JSON.stringify(data.toString())}, want ${JSON.stringify(payload.toString())}`);
  await s.close();
  return { pong: data.toString() };
}

async function checkWsClose(s) {
  const { code, reason } = await s.close();
  if (code !== 1000) fail(`closed with 1000, the server answered ${code} ${JSON.stringify(reason)}`);
  return { close_code: code, close_reason: reason };
}

// ---- the program ------------------------------------------------------------------------

const HTTP_CHECKS = { reuse: checkReuse, concurrent: checkConcurrent, echo: checkEcho, download: checkDownload };
const WS_CHECKS = { 'ws-text': checkWsText, 'ws-binary': checkWsBinary, 'ws-ping': checkWsPing, 'ws-close': checkWsClose };
const DEFAULTS = { reuse: { n: 5 }, concurrent: { n: 50 }, echo: { size: 4 * MIB }, download: { size: 32 * MIB } };

function usage(message) {
  const checks = [...Object.keys(HTTP_CHECKS), ...Object.keys(WS_CHECKS)].join('|');
  process.stderr.write(`${message}\nusage: node client.js ${checks}` +
    ' --transport h2c|h2|https|ws|wss --port PORT [--ca ca.pem] [--n N] [--size BYTES] [--timeout SECONDS]\n');
  process.exit(2);
}

function options() {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        transport: { type: 'string' }, port: { type: 'string' }, ca: { type: 'string' },
        n: { type: 'string' }, size: { type: 'string' }, timeout: { type: 'string', default: '50' },
      },
    });
  } catch (err) {
    usage(err.message);
  }
  const { positionals, values } = parsed;
  const check = positionals[0];
  const ws = check in WS_CHECKS;
  if (positionals.length !== 1 || !(ws || check in HTTP_CHECKS)) {
    usage(`unknown check ${JSON.stringify(positionals.join(' '))}`);
  }
  const transports = ws ? ['ws', 'wss'] : ['h2c', 'h2', 'https'];
  if (!transports.includes(values.transport)) usage(`${check} runs over ${transports.join(', ')}, not ${values.transport}`);
  if (!/^\d+$/.test(values.port || '')) usage('--port is required');
  const tls = ['h2', 'https', 'wss'].includes(values.transport);
  if (tls !== Boolean(values.ca)) usage(tls ? `--ca is required over ${values.transport}` : '--ca is for TLS transports only');
  const defaults = DEFAULTS[check] || {};
  return {
    check,
    transport: values.transport,
    port: Number(values.port),
    ca: values.ca,
    n: Number(values.n ?? defaults.n ?? 1),
    size: Number(values.size ?? defaults.size ?? 0),
    timeout: Number(values.timeout),
  };
}

async function run(o) {
  if (o.check in WS_CHECKS) {
    const s = new Socket(o);
    try {
      await s.open();
      return { ...(await WS_CHECKS[o.check](s)), ...s.summary() };
    } finally {
      s.ws.terminate();
    }
  }
  const t = new Target(o);
  try {
    await t.open().catch((err) => fail(err instanceof Failure ? err.message : `connecting: ${err.message}`));
    const result = await HTTP_CHECKS[o.check](t, o);
    return { ...result, version: t.wantVersion, ...(t.session ? { alpn: t.session.alpnProtocol } : {}) };
  } finally {
    t.close();
  }
}

function main() {
  const o = options();
  const prefix = `${o.check} over ${o.transport}`;
  setTimeout(() => {
    process.stderr.write(`${prefix}: no result within ${o.timeout}s\n`);
    process.exit(1);
  }, o.timeout * 1000).unref();
  run(o).then(
    (result) => {
      process.stdout.write(`${JSON.stringify({ check: o.check, transport: o.transport, ...result })}\n`);
      process.exit(0);
    },
    (err) => {
      process.stderr.write(`${prefix}: ${err instanceof Failure ? err.message : err.stack}\n`);
      process.exit(1);
    },
  );
}

main();
