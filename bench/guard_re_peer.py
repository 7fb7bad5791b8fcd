#!/usr/bin/env python3
"""The peer of bench/guard_benchmark.cc: the same entity types found with Python's `re` the way
Presidio's pattern recognizers find them (one pattern per recognizer, each a pass over the
text), every match then validated as pillar validates it (Luhn, mod 97, check digits, octets,
ipaddress). Prints "<MB/s> <findings>" for the best of ROUNDS passes over FILE.

Usage: guard_re_peer.py FILE [ROUNDS]
"""
import ipaddress
import re
import sys
import time


def luhn(d):
    total = 0
    for i, c in enumerate(reversed(d)):
        n = int(c)
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def mod97(s):
    s = s.replace(" ", "")
    r = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in r)) % 97 == 1


def br(d, weights):
    r = sum(int(c) * w for c, w in zip(d, weights)) % 11
    return 0 if r < 2 else 11 - r


def cpf(m):
    d = re.sub(r"\D", "", m)
    return len(set(d)) > 1 and br(d[:9], range(10, 1, -1)) == int(d[9]) and \
        br(d[:10], range(11, 1, -1)) == int(d[10])


def cnpj(m):
    d = re.sub(r"\D", "", m)
    return len(set(d)) > 1 and br(d[:12], [5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]) == int(d[12]) and \
        br(d[:13], [6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]) == int(d[13])


def nif(d):
    r = sum(int(c) * (9 - i) for i, c in enumerate(d[:8])) % 11
    return d[0] in "1235689" and (0 if r < 2 else 11 - r) == int(d[8])


def ipv6(m):
    try:
        ipaddress.IPv6Address(m)
        return True
    except ValueError:
        return False


RECOGNIZERS = [
    (r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}", lambda m: True),
    (r"\b(?:\d[ -]?){12,18}\d\b", lambda m: luhn(re.sub(r"\D", "", m))),
    (r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b", mod97),
    (r"\b(?:\d{1,3}\.){3}\d{1,3}\b", lambda m: all(int(o) < 256 for o in m.split("."))),
    (r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])", ipv6),
    (r"\b\d{3}-\d{2}-\d{4}\b", lambda m: m[:3] not in ("000", "666") and m[0] != "9"),
    (r"\b\d{3}\.\d{3}\.\d{3}-\d{2}\b|\b\d{11}\b", cpf),
    (r"\b\d{2}\.\d{3}\.\d{3}/\d{4}-\d{2}\b|\b\d{14}\b", cnpj),
    (r"\b\d{9}\b", nif),
    (r"\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}\b|\(\d{2,3}\) ?\d{4,5}-\d{4}\b", lambda m: True),
    (r"\b(?:AKIA|ASIA)[A-Z2-7]{16}\b|\bgh[pousr]_[A-Za-z0-9]{36}\b|"
     r"\beyJ[\w-]{10,}\.eyJ[\w-]{10,}\.[\w-]*|\bpk_[0-9a-f]{12}_[\w-]{43}\b|"
     r"-----BEGIN [A-Z ]*PRIVATE KEY-----", lambda m: True),
]


def main():
    text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
    size = len(text.encode())
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    compiled = [(re.compile(p), check) for p, check in RECOGNIZERS]
    best, found = 1e30, 0
    for _ in range(rounds):
        start = time.perf_counter()
        found = sum(1 for rx, check in compiled for m in rx.finditer(text) if check(m.group()))
        best = min(best, time.perf_counter() - start)
    print(f"{size / 1e6 / best:.1f} {found}")


if __name__ == "__main__":
    main()
