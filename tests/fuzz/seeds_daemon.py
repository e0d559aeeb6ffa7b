#!/usr/bin/python3
"""Writes the seed corpora of fuzz_conn and fuzz_upstream (tests/fuzz/corpus/{conn,upstream}/).

The encodings are described at the top of tests/fuzz/fuzz_conn.c and fuzz_upstream.c.
Run from the repository root; existing seeds of the same names are overwritten.
"""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRITE, TPL, REST, READ, RUN, SLEEP, SHUT, RESET, CLOSE, WAIT, BURST = range(11)

GET_A = b"GET /a/x HTTP/1.1\r\nHost: t\r\n\r\n"
POST_B = b"POST /b/y HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = b"POST /b/c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n"


def op(client, code, *args):
    return bytes([(client << 4) | code]) + bytes(args)


def write(client, data):
    out = b""
    for i in range(0, len(data), 255):
        part = data[i:i + 255]
        out += op(client, WRITE, len(part)) + part
    return out


def conn_seeds():
    s = {}
    s["get_wait_read"] = b"\x01" + op(0, TPL, 0, 0) + op(0, WAIT) + op(0, READ)
    s["pipeline_burst"] = b"\x00" + op(0, BURST, 0, 39) + op(0, RUN, 63) + op(0, READ) + op(0, RUN, 63) + op(0, READ)
    s["pipeline_mixed"] = b"\x02" + write(0, GET_A + POST_B + b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n" + GET_A) + \
        op(0, WAIT) + op(0, READ) + op(0, RUN, 40) + op(0, READ)
    head = GET_A
    for cut in (1, 4, 9, 16, 20, len(head) - 3, len(head) - 1):
        s[f"split_head_{cut}"] = b"\x00" + write(0, head[:cut]) + op(0, RUN, 3) + write(0, head[cut:]) + op(0, WAIT) + op(0, READ)
    s["split_head_bytewise"] = b"\x00" + b"".join(write(0, head[i:i + 1]) + op(0, RUN, 0) for i in range(len(head))) + op(0, WAIT)
    s["chunked_body"] = b"\x01" + write(0, CHUNKED) + op(0, WAIT) + op(0, READ)
    s["chunked_split"] = b"\x01" + write(0, CHUNKED[:70]) + op(0, RUN, 2) + write(0, CHUNKED[70:85]) + op(0, RUN, 2) + \
        write(0, CHUNKED[85:]) + op(0, WAIT) + op(0, READ)
    s["chunked_tpl"] = b"\x00" + op(0, TPL, 2, 0) + op(0, WAIT) + op(0, READ)
    s["reset_mid_head"] = b"\x00" + op(0, TPL, 1, 30) + op(0, RUN, 2) + op(0, RESET) + op(1, TPL, 0, 0) + op(1, WAIT)
    s["reset_mid_body"] = b"\x00" + op(0, TPL, 1, 50) + op(0, RUN, 2) + op(0, RESET)
    s["reset_while_running"] = b"\x07" + op(0, TPL, 0, 0) + op(0, RUN, 4) + op(0, RESET) + op(0, RUN, 20)
    s["reset_while_queued"] = b"\x07" + op(0, TPL, 0, 0) + op(1, TPL, 0, 0) + op(2, TPL, 0, 0) + op(0, RUN, 3) + \
        op(1, RESET) + op(2, CLOSE) + op(0, WAIT)
    s["queue_full"] = b"\x07" + op(0, BURST, 0, 3) + op(1, TPL, 0, 0) + op(2, TPL, 0, 0) + op(2, RUN, 10) + \
        op(1, READ) + op(2, READ) + op(0, WAIT)
    s["expect_continue"] = b"\x00" + op(0, TPL, 6, len(b"POST /a/e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")) + op(0, RUN, 3) + op(0, READ) + op(0, REST) + op(0, WAIT) + op(0, READ)
    s["expect_too_big"] = b"\x00" + op(0, TPL, 15, 0) + op(0, RUN, 3) + op(0, READ) + op(0, WAIT)
    # Expect heads refused before their bodies (404 unknown route, 400 bad priority) and one
    # whose model is named in the body (100 Continue, then the body)
    s["expect_refused_on_head"] = b"\x00" + \
        write(0, b"POST /zz/u HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4000\r\n\r\n") + \
        op(0, RUN, 3) + op(0, READ) + \
        write(1, b"POST /a/p HTTP/1.1\r\nHost: t\r\nX-Vramd-Priority: x\r\nExpect: 100-continue\r\n"
                 b"Content-Length: 4000\r\n\r\n") + op(1, WAIT) + \
        write(2, b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 15\r\n\r\n") + \
        op(2, RUN, 3) + op(2, READ) + write(2, b'{"model":"bee"}') + op(2, WAIT) + op(2, READ) + op(0, WAIT)
    s["keepalive_sequence"] = b"\x01" + b"".join(op(0, TPL, t, 0) + op(0, WAIT) + op(0, READ) for t in (0, 1, 3, 4, 8, 17, 10))
    s["half_close_after_request"] = b"\x02" + op(0, TPL, 0, 0) + op(0, SHUT) + op(0, WAIT) + op(0, READ)
    s["half_close_mid_head"] = b"\x00" + op(0, TPL, 0, 12) + op(0, SHUT) + op(0, WAIT)
    s["deadline"] = b"\x07" + op(0, TPL, 0, 0) + op(1, TPL, 7, 0) + op(1, SLEEP, 4) + op(1, WAIT) + op(0, WAIT)
    s["slowloris"] = b"\x00" + op(0, TPL, 0, 10) + b"".join(op(0, SLEEP, 7) for _ in range(14)) + op(0, WAIT)
    s["head_and_http10"] = b"\x00" + op(0, TPL, 9, 0) + op(0, WAIT) + op(1, TPL, 8, 0) + op(1, WAIT) + op(1, READ)
    s["cl_te_smuggle"] = b"\x00" + op(0, TPL, 16, 0) + op(0, TPL, 0, 0) + op(0, WAIT)
    s["admin_unload_load"] = b"\x00" + op(0, TPL, 13, 0) + op(0, WAIT) + op(1, TPL, 0, 0) + op(1, RUN, 20) + \
        op(2, TPL, 14, 0) + op(2, WAIT) + op(1, WAIT)
    s["status_metrics_models"] = b"\x00" + op(0, TPL, 5, 0) + op(0, TPL, 11, 0) + op(0, TPL, 19, 0) + op(0, TPL, 18, 0) + \
        op(0, TPL, 12, 0) + op(0, RUN, 63) + op(0, READ)
    s["slow_reader_status_burst"] = b"\x00" + op(0, BURST, 5, 39) + op(0, RUN, 63) + op(0, RUN, 63) + op(0, READ) + op(0, RUN, 63)
    s["bad_bytes"] = b"\x00" + write(0, b"GET /a/x HTTP/1.1\r\nHost: t\r\nX: a\x00b\r\n\r\n") + op(0, WAIT)
    return s


def up_seed(flags, answer, splits=b"", fill=0):
    return bytes([flags, (fill << 3) | len(splits)]) + splits + answer


def upstream_seeds():
    s = {}
    cl = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world"
    ch = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=val\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n"
    s["cl"] = up_seed(0, cl)
    s["cl_split"] = up_seed(0, cl, bytes([20, 61, 130, 200]))
    s["cl_keep"] = up_seed(2, cl)
    s["cl_keep_two_requests"] = up_seed(2 | 64, cl)
    s["cl_hold_short_body"] = up_seed(3, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
    s["cl_close_short_body"] = up_seed(0, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
    s["chunked_ext_trailer"] = up_seed(0, ch)
    s["chunked_split"] = up_seed(0, ch, bytes([80, 90, 101, 150, 230]))
    s["chunked_bad_size"] = up_seed(2, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
    s["chunked_cut"] = up_seed(0, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")
    s["until_close"] = up_seed(0, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
    s["until_close_http10_client"] = up_seed(128, b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
    s["interim_100"] = up_seed(0, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + cl)
    s["switching_101"] = up_seed(0, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n")
    s["cl_and_te"] = up_seed(0, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    s["dup_cl"] = up_seed(0, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!")
    s["oversized_head"] = up_seed(0, cl, fill=17)
    s["big_head_fits"] = up_seed(0, cl, fill=15)
    s["early_close"] = up_seed(0, b"")
    s["early_close_mid_head"] = up_seed(0, b"HTTP/1.1 200 OK\r\nContent-Le")
    s["head_request"] = up_seed(16, b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n")
    s["post_204_304"] = up_seed(32, b"HTTP/1.1 204 No Content\r\n\r\n")
    s["status_500"] = up_seed(0, b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops")
    s["checked_valid_json"] = up_seed(8, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
    s["checked_bad_json"] = up_seed(8, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{not json")
    s["checked_chunked"] = up_seed(8, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n")
    s["safe_retry_early_close"] = up_seed(12, b"")
    s["safe_malformed"] = up_seed(12, b"HTTP/1.1 OK\r\n\r\n")
    s["bare_lf"] = up_seed(0, b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok")
    s["nul_in_header"] = up_seed(0, b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok")
    return s


def main():
    for name, seeds in (("conn", conn_seeds()), ("upstream", upstream_seeds())):
        d = os.path.join(ROOT, "tests", "fuzz", "corpus", name)
        os.makedirs(d, exist_ok=True)
        for k, v in seeds.items():
            with open(os.path.join(d, k), "wb") as f:
                f.write(v)
        print(f"{name}: {len(seeds)} seeds in {d}")


if __name__ == "__main__":
    main()
