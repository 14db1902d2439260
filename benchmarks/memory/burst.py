"""Resident memory of a running `duet serve` through bursts of large prediction bodies.

Sixteen clients at once, four requests each, of the abuse test's bodies: 75,000 pairs within
the body limit (refused by count) and 20,000 valid pairs padded to the body limit (answered or
shed); VmHWM (peak) and VmRSS (now) of the server after each phase. The server must run with
`--max-pairs 20000 --max-inflight 2 --max-queue 4` (the body limit follows --max-pairs).

Usage: python benchmarks/memory/burst.py PORT SERVER_PID
"""
import http.client, json, sys, threading, time, subprocess, os, re
port = int(sys.argv[1]); pid = int(sys.argv[2])
PAIR = '{"a":{"workload":"a3c"},"b":{"workload":"cyclegan"},"mode":"space"}'
max_pairs = 20000; max_body = max_pairs * 256 + 64 * 1024
def body(n, pad=0):
    b = '{"gpu":"v100","pairs":[' + ','.join([PAIR] * n) + ']}'
    return (b + ' ' * max(0, pad - len(b))).encode()
at_limit = body(max_pairs, max_body)
too_many = body(max_body // (len(PAIR) + 1) - 1)
def mem():
    s = open(f'/proc/{pid}/status').read()
    return {k: int(re.search(k + r':\s+(\d+)', s).group(1)) // 1024 for k in ('VmHWM', 'VmRSS')}
def post(b):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    c.request('POST', '/v1/predict', b, {'Content-Type': 'application/json'})
    r = c.getresponse(); r.read(); c.close(); return r.status
def phase(name, b, n=16, rounds=4):
    codes = {}
    def run():
        for _ in range(rounds):
            s = post(b); codes[s] = codes.get(s, 0) + 1
    ts = [threading.Thread(target=run) for _ in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print(name, codes, mem(), flush=True)
print('rest', mem())
phase('too_many x1', too_many, 1, 1)
phase('at_limit x1', at_limit, 1, 1)
phase('too_many 16x4', too_many)
phase('at_limit 16x4', at_limit)
phase('mixed', at_limit)
