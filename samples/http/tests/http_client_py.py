#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Python's http.client and raw sockets against weft-http.

Usage: http_client_py.py PORT ROOT [tls CAFILE]

http.client: keep-alive GETs on one connection, HEAD, a chunked POST,
a static file. Raw sockets: 16 pipelined requests in one send answered in
order, Expect: 100-continue, and the hostile cases (smuggling, sizes, a
slow head, a stalled body) each answered with its status and a close.
Prints one line per check and 'N passed, N failed' last; exits non-zero on
a failure.
"""
import http.client
import socket
import ssl
import sys
import time

port = int(sys.argv[1])
root = sys.argv[2]
tls_ctx = None
if len(sys.argv) > 4 and sys.argv[3] == "tls":
    tls_ctx = ssl.create_default_context(cafile=sys.argv[4])
    tls_ctx.set_alpn_protocols(["http/1.1"])

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {name}: {detail}")


def conn():
    if tls_ctx is not None:
        return http.client.HTTPSConnection("127.0.0.1", port, context=tls_ctx,
                                           timeout=20)
    return http.client.HTTPConnection("127.0.0.1", port, timeout=20)


def raw():
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    if tls_ctx is not None:
        s = tls_ctx.wrap_socket(s, server_hostname="localhost")
    return s


def read_all(s, until_close=True, want=None):
    """Reads until the peer closes (or `want` bytes were seen)."""
    data = b""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            break
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
        if want is not None and want(data):
            break
    return data


# ---- http.client ----
c = conn()
for i in range(3):
    c.request("GET", "/plaintext")
    r = c.getresponse()
    body = r.read()
    check(f"http_py_keepalive_get_{i}", r.status == 200 and
          body == b"Hello, World!", f"{r.status} {body!r}")
check("http_py_date_header", c.sock is not None)
c.request("GET", "/json")
r = c.getresponse()
check("http_py_json", r.read() == b'{"message":"Hello, World!"}' and
      r.getheader("Content-Type") == "application/json")
c.request("HEAD", "/plaintext")
r = c.getresponse()
check("http_py_head_has_length_no_body",
      r.getheader("Content-Length") == "13" and r.read() == b"")
c.request("POST", "/plaintext", body=iter([b"abc", b"defg"]),
          encode_chunked=True, headers={"Transfer-Encoding": "chunked"})
r = c.getresponse()
check("http_py_chunked_post_answered", r.status == 405, str(r.status))
r.read()
c.request("GET", "/index.html")
r = c.getresponse()
with open(f"{root}/index.html", "rb") as f:
    check("http_py_static_file", r.read() == f.read())
c.request("GET", "/big.bin")
r = c.getresponse()
with open(f"{root}/big.bin", "rb") as f:
    check("http_py_static_big_file", r.read() == f.read())
c.request("GET", "/missing")
r = c.getresponse()
check("http_py_404", r.status == 404)
r.read()
c.close()

# ---- pipelining: 16 requests in one send, answered in order ----
s = raw()
targets = ["/plaintext", "/json"] * 8
s.sendall(b"".join(f"GET {t} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                   for t in targets))
data = read_all(s, want=lambda d: d.count(b"HTTP/1.1 200 OK") == 16 and
                d.endswith(b"}"))
bodies = [part.split(b"\r\n\r\n", 1)[1][:27]
          for part in data.split(b"HTTP/1.1 200 OK")[1:]]
expect = [b"Hello, World!" if t == "/plaintext" else
          b'{"message":"Hello, World!"}' for t in targets]
check("http_py_pipelined_16_in_order",
      [b[:len(e)] for b, e in zip(bodies, expect)] == expect,
      repr(data[:200]))
s.close()

# ---- Expect: 100-continue ----
s = raw()
s.sendall(b"POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
          b"Expect: 100-continue\r\n\r\n")
first = read_all(s, want=lambda d: b"\r\n\r\n" in d)
check("http_py_100_continue", first.startswith(b"HTTP/1.1 100 Continue"),
      repr(first))
s.sendall(b"data")
rest = read_all(s, want=lambda d: b"Method Not Allowed\n" in d)
check("http_py_after_continue", b"405" in rest, repr(rest))
s.close()

# ---- hostile input: the status, then the close ----
hostile = [
    ("cl_and_te", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400),
    ("duplicate_cl", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
     b"Content-Length: 4\r\n\r\nabcd", 400),
    ("obs_fold", b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 400),
    ("te_not_chunked", b"POST / HTTP/1.1\r\nHost: x\r\n"
     b"Transfer-Encoding: gzip\r\n\r\n", 400),
    ("no_host", b"GET / HTTP/1.1\r\n\r\n", 400),
    ("long_target", b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n", 414),
    ("long_header", b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"b" * 20000, 431),
    ("many_headers", b"GET / HTTP/1.1\r\nHost: x\r\n" +
     b"".join(b"H%d: v\r\n" % i for i in range(120)) + b"\r\n", 431),
    ("big_body", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000"
     b"\r\n\r\n", 413),
    ("http2_preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),
]
for name, wire, status in hostile:
    s = raw()
    try:
        s.sendall(wire)
    except (BrokenPipeError, ConnectionResetError):
        pass
    data = read_all(s)
    check(f"http_py_hostile_{name}",
          data.startswith(b"HTTP/1.1 %d " % status) and
          b"Connection: close" in data, repr(data[:100]))
    s.close()

# Slowloris: half a head, then nothing; the server gives 408 and closes.
s = raw()
s.sendall(b"GET / HTTP/1.1\r\nHo")
t0 = time.monotonic()
data = read_all(s)
check("http_py_slow_head_408", data.startswith(b"HTTP/1.1 408 "),
      repr(data[:100]))
s.close()

# A body that stops: 3 of its 10 bytes, then nothing; after
# body_timeout_ms the server gives 408 and closes.
s = raw()
s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
data = read_all(s)
check("http_py_stalled_body_408", data.startswith(b"HTTP/1.1 408 ") and
      b"Connection: close" in data, repr(data[:100]))
s.close()

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
