#include "objstore/s3_test_server.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>

#include "common/clock.h"
#include "common/net.h"
#include "common/proc.h"

namespace bulwark::objstore {
namespace {

// Node program run with `node -e <this> <s3rver dir> <address> <data dir> <region>`.
// Loads s3rver, puts a SigV4 verifier in front of its handlers, listens on an
// ephemeral port and prints "S3RVER_READY <port>". The verifier is written from the
// S3 SigV4 specification independently of the C++ signer: it recomputes the canonical
// request from the request as received (path and query decoded and re-encoded, the
// headers named in SignedHeaders), so it checks what was sent, not what was meant.
constexpr const char* kVerifierJs = R"JS(
'use strict';
const crypto = require('crypto');
const path = require('path');
const [s3rverDir, address, directory, region] = process.argv.slice(1);
const S3rver = require(s3rverDir);
const S3Error = require(path.join(s3rverDir, 'lib', 'models', 'error.js'));
const SECRETS = { S3RVER: 'S3RVER' };  // s3rver's built-in account

const sha256hex = (data) => crypto.createHash('sha256').update(data).digest('hex');
const hmac = (key, msg) => crypto.createHmac('sha256', key).update(msg, 'utf8').digest();

function fail(code, message, status, detail) {
  const e = new S3Error(code, message, detail || {});
  e.status = status;
  e.expose = status < 500;
  // Details go in the XML body only: header values cannot hold newlines.
  e.headers = { 'x-amz-error-code': code };
  return e;
}

function uriEncode(s, keepSlash) {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(b);
    if (/[A-Za-z0-9\-._~]/.test(c) || (keepSlash && c === '/')) out += c;
    else out += '%' + (b < 16 ? '0' : '') + b.toString(16).toUpperCase();
  }
  return out;
}

function decode(s, plusIsSpace) {
  try {
    return decodeURIComponent(plusIsSpace ? s.replace(/\+/g, ' ') : s);
  } catch (err) {
    throw fail('InvalidURI', "Couldn't parse the specified URI.", 400);
  }
}

function canonicalQuery(raw) {
  const pairs = raw.split('&').filter((p) => p !== '').map((p) => {
    const i = p.indexOf('=');
    const k = i < 0 ? p : p.slice(0, i);
    const v = i < 0 ? '' : p.slice(i + 1);
    return [uriEncode(decode(k, true), false), uriEncode(decode(v, true), false)];
  });
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  pairs.sort((a, b) => cmp(a[0], b[0]) || cmp(a[1], b[1]));
  return pairs.map(([k, v]) => k + '=' + v).join('&');
}

function checkPayload(shaHex, md5b64, payloadHash, md5Header) {
  if (payloadHash !== 'UNSIGNED-PAYLOAD' && shaHex !== payloadHash) {
    throw fail('XAmzContentSHA256Mismatch',
      "The provided 'x-amz-content-sha256' header does not match what was computed.", 400,
      { ClientComputedContentSHA256: payloadHash, S3ComputedContentSHA256: shaHex });
  }
  if (md5Header !== undefined && md5Header !== md5b64) {
    throw fail('BadDigest', 'The Content-MD5 you specified did not match what we received.', 400);
  }
}

async function verifySigV4(ctx, next) {
  const req = ctx.req;
  const h = req.headers;
  const auth = h['authorization'];
  if (!auth) throw fail('AccessDenied', 'Access Denied (unsigned request)', 403);
  const m = /^AWS4-HMAC-SHA256 Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) throw fail('AuthorizationHeaderMalformed', 'The authorization header is malformed.', 400);
  const scope = m[1].split('/');
  if (scope.length !== 5) throw fail('AuthorizationHeaderMalformed', 'Malformed Credential.', 400);
  const [accessKey, date, reg, service, terminator] = scope;
  const secret = SECRETS[accessKey];
  if (secret === undefined) return next();  // s3rver answers 403 InvalidAccessKeyId
  if (reg !== region) {
    throw fail('AuthorizationHeaderMalformed',
      `The authorization header is malformed; the region '${reg}' is wrong; expecting '${region}'`, 400);
  }
  if (service !== 's3' || terminator !== 'aws4_request') {
    throw fail('AuthorizationHeaderMalformed', 'Credential scope must end in s3/aws4_request.', 400);
  }
  const amzDate = h['x-amz-date'] || '';
  if (!/^\d{8}T\d{6}Z$/.test(amzDate) || amzDate.slice(0, 8) !== date) {
    throw fail('AuthorizationHeaderMalformed', 'x-amz-date does not match the credential date.', 400);
  }
  const signed = m[2].split(';');
  if (signed.join(';') !== [...signed].sort().join(';') || signed.some((n) => n !== n.toLowerCase()) ||
      !signed.includes('host')) {
    throw fail('AuthorizationHeaderMalformed', 'SignedHeaders must be lowercase, sorted and include host.', 400);
  }
  for (const name of Object.keys(h)) {
    if (name.startsWith('x-amz-') && !signed.includes(name)) {
      throw fail('AccessDenied', 'There were headers present in the request which were not signed', 403,
        { HeadersNotSigned: name });
    }
  }
  const payloadHash = h['x-amz-content-sha256'];
  if (!payloadHash) {
    throw fail('InvalidRequest', 'Missing required header for this request: x-amz-content-sha256', 400);
  }
  const q = req.url.indexOf('?');
  const rawPath = q < 0 ? req.url : req.url.slice(0, q);
  const rawQuery = q < 0 ? '' : req.url.slice(q + 1);
  const lines = signed.map((name) => {
    if (h[name] === undefined) throw fail('AccessDenied', `Signed header ${name} is missing.`, 403);
    return name + ':' + String(h[name]).trim().replace(/ +/g, ' ');
  });
  const canonicalRequest = [req.method, uriEncode(decode(rawPath, false), true), canonicalQuery(rawQuery),
    lines.join('\n') + '\n', signed.join(';'), payloadHash].join('\n');
  const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope.slice(1).join('/'),
    sha256hex(canonicalRequest)].join('\n');
  let key = hmac('AWS4' + secret, date);
  for (const part of scope.slice(2)) key = hmac(key, part);
  if (hmac(key, stringToSign).toString('hex') !== m[3]) {
    throw fail('SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. ' +
      'Check your key and signing method.', 403,
      { AWSAccessKeyId: accessKey, StringToSign: stringToSign, CanonicalRequest: canonicalRequest });
  }

  const md5Header = h['content-md5'];
  if (!Number(h['content-length'] || 0) && !h['transfer-encoding']) {
    checkPayload(sha256hex(''), crypto.createHash('md5').digest('base64'), payloadHash, md5Header);
    return next();
  }
  // Hash the body as s3rver consumes it (it pipes the request, which emits 'data').
  const sha = crypto.createHash('sha256');
  const md5 = crypto.createHash('md5');
  let ended = false;
  const emit = req.emit;
  req.emit = function (event, ...args) {
    if (event === 'data') { sha.update(args[0]); md5.update(args[0]); }
    if (event === 'end') ended = true;
    return emit.call(this, event, ...args);
  };
  await next();
  // A request s3rver refused without reading its body keeps s3rver's answer. (Unlike
  // real S3, a mismatching body has been stored by now; the client still gets the error.)
  if (ended) checkPayload(sha.digest('hex'), md5.digest('base64'), payloadHash, md5Header);
}

const server = new S3rver({ address, port: 0, directory, silent: true });
server.middleware.unshift(verifySigV4);  // before s3rver's own middleware
process.on('SIGTERM', () => process.exit(0));
server.run().then(({ port }) => console.log('S3RVER_READY ' + port), (err) => {
  console.error(err);
  process.exit(1);
});
)JS";

std::string FindOnPath(const std::string& exe, const std::string& path) {
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    std::string c = dir + "/" + exe;
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

// The port in "<marker><digits>" within out, or 0.
int PortAfter(const std::string& out, const std::string& marker) {
  size_t p = out.find(marker);
  if (p == std::string::npos) return 0;
  p += marker.size();
  size_t e = p;
  while (e < out.size() && out[e] >= '0' && out[e] <= '9') ++e;
  if (e == p || e == out.size()) return 0;  // wait for the whole number
  return std::stoi(out.substr(p, e - p));
}

}  // namespace

Result<std::unique_ptr<S3TestServer>> S3TestServer::Start(const S3TestServerOptions& opts) {
  const std::string hint =
      "; run scripts/setup.sh (installs node/npm and runs `npm ci --prefix tools/s3rver`)";
  const std::string s3rver_dir = opts.source_dir + "/tools/s3rver/node_modules/s3rver";
  if (access((s3rver_dir + "/bin/s3rver.js").c_str(), R_OK) != 0) {
    return FailedPrecondition("s3rver is not installed (no " + s3rver_dir + "/bin/s3rver.js)" +
                              hint);
  }
  auto env = CurrentEnv();
  const std::string node = FindOnPath("node", env["PATH"]);
  if (node.empty()) return FailedPrecondition("node is not on PATH" + hint);

  std::unique_ptr<S3TestServer> s(new S3TestServer());
  char tmpl[] = "/tmp/bw-s3rver-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return ErrnoStatus("mkdtemp /tmp/bw-s3rver-XXXXXX", errno);
  s->dir_ = tmpl;

  SpawnOptions so;
  so.env = env;
  // s3rver makes ListObjectsV2 continuation tokens with DES, which OpenSSL 3 (node >= 17)
  // only offers through its legacy provider; without it every truncated listing is a
  // 500 InternalError.
  const std::string legacy = "--openssl-legacy-provider";
  so.capture_output = true;
  if (opts.verify_sigv4) {
    so.argv = {node, legacy, "-e", kVerifierJs, s3rver_dir, "127.0.0.1", s->dir_, "us-east-1"};
  } else {
    so.argv = {node,          legacy,   s3rver_dir + "/bin/s3rver.js",
               "--directory", s->dir_,  "--address",
               "127.0.0.1",   "--port", "0",
               "--silent"};
  }
  BW_ASSIGN_OR_RETURN(Child child, Spawn(so));
  s->pid_ = child.pid;
  s->pgid_ = child.pgid;
  s->out_fd_ = child.output.Release();

  const std::string marker = opts.verify_sigv4 ? "S3RVER_READY " : "listening on 127.0.0.1:";
  const double deadline = SystemClock::Get()->NowMono() + opts.startup_timeout_s;
  while (s->port_ == 0) {
    PollReadable({s->out_fd_}, 0.05);
    bool eof = false;
    s->output_ += ReadAvailable(s->out_fd_, &eof);
    s->port_ = PortAfter(s->output_, marker);
    if (s->port_ != 0) break;
    if (auto exit = Reap(s->pid_)) {
      s->pid_ = -1;
      return FailedPrecondition("s3rver exited during startup (" + exit->Describe() +
                                "); output:\n" + s->output_ + "\n" + hint.substr(2));
    }
    if (SystemClock::Get()->NowMono() > deadline) {
      return DeadlineExceeded("s3rver did not report its port within " +
                              std::to_string(opts.startup_timeout_s) + " s; output:\n" +
                              s->output_);
    }
  }
  // It said it listens; confirm with a connection before handing it out.
  auto conn =
      TcpConnect("127.0.0.1", s->port_, std::max(0.1, deadline - SystemClock::Get()->NowMono()));
  if (!conn.ok()) return conn.status().Annotate("s3rver on port " + std::to_string(s->port_));
  return s;
}

std::string S3TestServer::Output() {
  if (out_fd_ >= 0) {
    bool eof = false;
    output_ += ReadAvailable(out_fd_, &eof);
  }
  return output_;
}

S3TestServer::~S3TestServer() {
  if (pid_ > 0) TerminateGroup(pid_, pgid_, 3.0);
  if (out_fd_ >= 0) close(out_fd_);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

}  // namespace bulwark::objstore
