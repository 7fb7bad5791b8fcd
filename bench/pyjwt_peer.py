"""The peer for pillar's JWT verification: PyJWT (Debian's python3-jwt, on python3-cryptography,
i.e. OpenSSL underneath), verifying the very tokens security_benchmark wrote, with the same
checks (signature, iss, aud, exp). Prints one line per algorithm: ALG MEDIAN_NS_PER_VERIFY.

    python3 bench/pyjwt_peer.py DIR   # DIR holds jwks.json and tokens.txt
"""
import json
import statistics
import sys
import time

import jwt


def main():
    directory = sys.argv[1]
    with open(f"{directory}/jwks.json") as f:
        jwks = jwt.PyJWKSet.from_dict(json.load(f))
    keys = {k.key_id: k.key for k in jwks.keys}
    with open(f"{directory}/tokens.txt") as f:
        tokens = [line.split() for line in f if line.strip()]
    for alg, token in tokens:
        key = keys[alg]

        def verify():
            jwt.decode(token, key, algorithms=[alg], audience="pillar", issuer="https://idp.bench")

        verify()
        samples = []
        for _ in range(7):
            n = 200
            start = time.perf_counter_ns()
            for _ in range(n):
                verify()
            samples.append((time.perf_counter_ns() - start) / n)
        print(alg, int(statistics.median(samples)))


if __name__ == "__main__":
    main()
