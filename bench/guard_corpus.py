#!/usr/bin/env python3
"""A labelled corpus for the guard's recognizers (docs/benchmarks.md, "Content safety").

One sample per line, English and Portuguese sentences. Each carries a valid value of one entity
type (generated with correct check digits, in the forms people write them) or a near miss that
must not be found (a card failing Luhn, a CPF with a wrong digit, an IP octet over 255, ...),
or only ordinary numbers (dates, prices, order numbers, versions). Writes TEXT_FILE (the lines)
and LABELS_FILE (JSON lines: {"line", "type", "start", "end", "context"} with byte offsets within
the line; "context" is false for the sentences that say nothing of what the value is). Deterministic for a seed.

With --mixed, writes MEGABYTES of prose with one such sentence in twenty lines instead, for the
speed benchmark.

Usage: guard_corpus.py TEXT_FILE LABELS_FILE [SAMPLES_PER_TYPE] [SEED]
       guard_corpus.py --mixed TEXT_FILE MEGABYTES
"""
import base64
import json
import random
import string
import sys

R = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[1] != "--mixed" else 7)


def digits(n):
    return "".join(R.choice(string.digits) for _ in range(n))


def luhn_complete(prefix, length):
    body = prefix + digits(length - len(prefix) - 1)
    total = 0
    for i, c in enumerate(reversed(body)):
        d = int(c)
        if i % 2 == 0:
            d *= 2
            d = d - 9 if d > 9 else d
        total += d
    return body + str((10 - total % 10) % 10)


def br_check(body, weights):
    s = sum(int(c) * w for c, w in zip(body, weights))
    r = s % 11
    return "0" if r < 2 else str(11 - r)


def cpf():
    b = digits(9)
    b += br_check(b, range(10, 1, -1))
    return b + br_check(b, range(11, 1, -1))


def cnpj():
    b = digits(8) + "0001"
    b += br_check(b, [5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2])
    return b + br_check(b, [6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2])


def nif():
    b = R.choice("1235") + digits(7)
    r = sum(int(c) * (9 - i) for i, c in enumerate(b)) % 11
    return b + ("0" if r < 2 else str(11 - r))


def iban(country, bban_len):
    bban = digits(bban_len)
    rearranged = bban + "".join(str(ord(c) - 55) for c in country) + "00"
    check = 98 - int(rearranged) % 97
    return f"{country}{check:02d}{bban}"


def change_last_digit(s):
    i = max(k for k, c in enumerate(s) if c.isdigit())
    return s[:i] + str((int(s[i]) + 1 + R.randrange(8)) % 10) + s[i + 1:]


def group(s, sizes, sep):
    out, at = [], 0
    for n in sizes:
        out.append(s[at:at + n])
        at += n
    return sep.join(out)


def card_value():
    brand = R.choice([("4", 16), ("51", 16), ("55", 16), ("2221", 16), ("34", 15), ("37", 15),
                      ("6011", 16), ("3530", 16)])
    v = luhn_complete(*brand)
    if len(v) == 15:
        return R.choice([v, group(v, [4, 6, 5], " ")])
    return R.choice([v, group(v, [4, 4, 4, 4], " "), group(v, [4, 4, 4, 4], "-")])


# Brazil's area codes (DDD): two digits, neither a 0.
DDD = [11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 24, 27, 28, 31, 32, 33, 34, 35, 37, 38, 41,
       42, 43, 44, 45, 46, 47, 48, 49, 51, 53, 54, 55, 61, 62, 63, 64, 65, 66, 67, 68, 69, 71, 73,
       74, 75, 77, 79, 81, 82, 83, 84, 85, 86, 87, 88, 89, 91, 92, 93, 94, 95, 96, 97, 98, 99]


def phone_value():
    kind = R.randrange(7)
    nxx = lambda: str(R.randint(2, 9)) + digits(2)
    if kind == 0:
        return f"+1 {nxx()} {nxx()} {digits(4)}"
    if kind == 1:
        return f"+55 {R.choice(DDD)} 9{digits(4)}-{digits(4)}"
    if kind == 2:
        return f"+351 9{R.choice('1236')}{digits(1)} {digits(3)} {digits(3)}"
    if kind == 3:
        return f"+44 20 {digits(4)} {digits(4)}"
    if kind == 4:
        return f"({nxx()}) {nxx()}-{digits(4)}"
    if kind == 5:
        return f"({R.choice(DDD)}) 9{digits(4)}-{digits(4)}"
    return f"9{R.choice('1236')}{digits(1)} {digits(3)} {digits(3)}"


def ipv4():
    return ".".join(str(R.randint(1, 254)) for _ in range(4))


def ipv6():
    groups = [f"{R.randrange(65536):x}" for _ in range(8)]
    if R.random() < 0.5:
        return "2001:db8::" + ":".join(groups[:3])
    return ":".join(groups)


def ssn():
    area = R.choice([n for n in range(1, 900) if n != 666])
    return f"{area:03d}-{R.randint(1, 99):02d}-{R.randint(1, 9999):04d}"


def email():
    first = R.choice(["maria", "joao", "ana", "john", "li", "pedro", "sofia", "alex"])
    last = R.choice(["silva", "santos", "smith", "costa", "wang", "oliveira"])
    dom = R.choice(["example.com", "mail.com.br", "empresa.pt", "uni.edu", "corp.io"])
    return R.choice([f"{first}.{last}@{dom}", f"{first}{R.randint(1, 99)}@{dom}",
                     f"{first}_{last}+news@{dom}"])


def b64url(n):
    return base64.urlsafe_b64encode(bytes(R.randrange(256) for _ in range(n))).decode().rstrip("=")


def secret():
    kind = R.randrange(5)
    if kind == 0:
        return "AKIA" + "".join(R.choice(string.ascii_uppercase + "234567") for _ in range(16))
    if kind == 1:
        return "ghp_" + "".join(R.choice(string.ascii_letters + string.digits) for _ in range(36))
    if kind == 2:
        header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
        payload = base64.urlsafe_b64encode(
            json.dumps({"sub": digits(8)}).encode()).decode().rstrip("=")
        return f"{header}.{payload}.{b64url(32)}"
    if kind == 3:
        return f"pk_{''.join(R.choice('0123456789abcdef') for _ in range(12))}_{b64url(32)}"
    body = base64.b64encode(bytes(R.randrange(256) for _ in range(48))).decode()
    return f"-----BEGIN RSA PRIVATE KEY----- {body} -----END RSA PRIVATE KEY-----"


VALID = {
    "EMAIL_ADDRESS": (email, ["Please write to {v} before Friday.", "Envie para {v} amanhã.",
                              "Contact: {v}", "O e-mail do cliente é {v}."]),
    "PHONE_NUMBER": (phone_value, ["Call me at {v} tonight.", "Ligue para {v} depois das 18h.",
                                   "Phone: {v}", "O meu telemóvel é {v}."]),
    "CREDIT_CARD": (card_value, ["My card number is {v}.", "Paguei com o cartão {v}.",
                                 "Charge {v} for the order."]),
    "IBAN_CODE": (lambda: R.choice([iban("PT", 21), iban("DE", 18), iban("ES", 20)]),
                  ["Transfer to IBAN {v} please.", "O IBAN da conta é {v}."]),
    "IP_ADDRESS": (lambda: R.choice([ipv4(), ipv6()]),
                   ["The server at {v} is down.", "Acesso vindo do endereço {v}."]),
    "US_SSN": (ssn, ["His SSN is {v}.", "Social security number {v} on file."]),
    "BR_CPF": (lambda: R.choice([format_cpf(cpf()), cpf()]),
               ["O CPF do titular é {v}.", "CPF: {v}", "Customer CPF {v} was verified."]),
    "BR_CNPJ": (lambda: R.choice([format_cnpj(cnpj()), cnpj()]),
                ["A empresa de CNPJ {v} emitiu a nota.", "CNPJ: {v}"]),
    "PT_NIF": (nif, ["O meu NIF é {v}.", "Contribuinte n.º {v}", "NIF {v} na fatura."]),
    "SECRET": (secret, ["Use the key {v} to log in.", "token={v}", "A chave é {v} não partilhe."]),
}


def format_cpf(c):
    return f"{c[:3]}.{c[3:6]}.{c[6:9]}-{c[9:]}"


def format_cnpj(c):
    return f"{c[:2]}.{c[2:5]}.{c[5:8]}/{c[8:12]}-{c[12:]}"


def near_misses():
    """Values that look right and fail their check: none of them may be found."""
    return [
        f"My card number is {group(change_last_digit(luhn_complete('4', 16)), [4, 4, 4, 4], ' ')}.",
        f"O CPF do titular é {change_last_digit(format_cpf(cpf()))}.",
        f"CNPJ: {change_last_digit(cnpj())}",
        f"O meu NIF é {change_last_digit(nif())}.",
        f"Transfer to IBAN {change_last_digit(iban('DE', 18))} please.",
        f"His SSN is {R.choice(['000', '666', '912'])}-{R.randint(10, 99)}-{R.randint(1000, 9999)}.",
        f"The server at {R.randint(256, 999)}.{R.randint(0, 255)}.{R.randint(0, 255)}.1 is down.",
        f"Call me at +1 1{digits(2)} {digits(3)} {digits(4)} tonight.",
        "Use the key AKIA" + "".join(R.choice(string.ascii_uppercase) for _ in range(15)) + " now.",
    ]


FILLER = [
    lambda: f"The meeting is on {R.randint(2000, 2030)}-{R.randint(1, 12):02d}-{R.randint(1, 28):02d}.",
    lambda: f"O preço é R$ {R.randint(1, 999)}.{digits(3)},{digits(2)} à vista.",
    lambda: f"Order #{digits(8)} shipped in {R.randint(2, 9)} boxes.",
    lambda: f"Upgrade to version {R.randint(1, 9)}.{R.randint(0, 20)}.{R.randint(0, 9)}.",
    lambda: f"We met at {R.randint(10, 23)}:{R.randint(10, 59)} and left at {R.randint(10, 23)}:30.",
    lambda: f"A encomenda {digits(10)} chega em {R.randint(2, 9)} dias.",
    lambda: f"Population grew to {R.randint(1, 999)} {digits(3)} {digits(3)} in {R.randint(1990, 2024)}.",
    # Bare numbers of the identifiers' lengths, said to be something else or nothing: a 9-, 11-
    # or 14-digit number passes a check digit by chance (about 1 in 11 or 1 in 100).
    lambda: f"O código {digits(11)} foi confirmado.",
    lambda: f"Batch {digits(14)} passed inspection.",
    lambda: f"Lote {digits(9)} em stock.",
]


# Sentences that say nothing of what the value is: what a recognizer finds here it finds from
# the value alone (a bare NIF or eleven bare digits are not expected to be found).
NEUTRAL = ["See also {v} in the notes.", "Veja {v} nas notas."]


WORDS = ("the of and to in is was for on that with as by at from this be are have it not or "
         "which an but they their we all can has more one will would there been if who out so "
         "model request server latency report data team system value user results analysis "
         "o a de que e do da em um para com não uma os no se na por mais as dos como mas foi ao "
         "ele das tem à seu sua ou ser quando muito há nos já está eu também só pelo pela até "
         "isso ela entre era depois sem mesmo aos ter seus quem nas me esse eles estão você "
         "relatório dados equipa pedido resposta modelo sistema análise resultados tempo").split()


def mixed(path, megabytes):
    """Prose (English and Portuguese words, some numbers) with one corpus sentence in twenty
    lines: text that is mostly not personal data, as logs and prompts are."""
    size = megabytes * 1_000_000
    written = 0
    with open(path, "w") as out:
        while written < size:
            line = []
            for _ in range(R.randint(8, 20)):
                w = R.choice(WORDS)
                line.append(w.capitalize() if R.random() < 0.08 else w)
                if R.random() < 0.03:
                    line.append(str(R.randint(1, 5000)))
            text = " ".join(line) + R.choice([".", ",", ";", ":", "?"])
            if R.random() < 0.05:
                etype = R.choice(list(VALID))
                make, templates = VALID[etype]
                text += " " + R.choice(templates).replace("{v}", make())
            out.write(text + "\n")
            written += len(text.encode()) + 1


def main():
    if sys.argv[1] == "--mixed":
        return mixed(sys.argv[2], int(sys.argv[3]))
    text_path, labels_path = sys.argv[1], sys.argv[2]
    per_type = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    samples = []
    for etype, (make, templates) in VALID.items():
        for _ in range(per_type):
            v = make()
            neutral = R.random() < 0.15
            t = R.choice(NEUTRAL) if neutral else R.choice(templates)
            prefix = t[:t.index("{v}")]
            line = t.replace("{v}", v)
            start = len(prefix.encode())
            samples.append((line, [(etype, start, start + len(v.encode()), not neutral)]))
    for _ in range(per_type // 4):
        for line in near_misses():
            samples.append((line, []))
    for _ in range(per_type):
        samples.append((R.choice(FILLER)(), []))
    R.shuffle(samples)
    with open(text_path, "w") as text, open(labels_path, "w") as labels:
        for n, (line, entities) in enumerate(samples):
            text.write(line + "\n")
            for etype, start, end, context in entities:
                labels.write(json.dumps({"line": n, "type": etype, "start": start, "end": end,
                                         "context": context}) + "\n")


if __name__ == "__main__":
    main()
