# SPDX-License-Identifier: ISC
"""tests/model/strategies.py: what the machine's rules draw.

It owns the strategies and helpers that make a request's parts from
Hypothesis's draws: id lengths (most of the mass near the key heap's
slots), ids, picking one of the model's keys the same way whatever
their number (pick), a text's spellings that normalize to one string
(variant), and results of a given size.  It never talks to the broker.
"""

import random
import unicodedata

from hypothesis import strategies as st

from harness import KEY_SLOT, MAX_ID, MAX_RESULT


def id_lengths():
    near = [k * KEY_SLOT + d for k in range(1, 4) for d in (-2, -1, 0, 1, 2)]
    # A report's key is task_id + "\n" + id: task ids here are 27..40
    # bytes, so ids near 56*k - 28..41 fill a report key to a boundary.
    near += [KEY_SLOT * k - t for k in (1, 2, 3, 4) for t in (28, 29, 35,
                                                              41)]
    near = [n for n in near if 1 <= n <= MAX_ID]
    return st.one_of(st.sampled_from(near + [1, 2, 199, 200]),
                     st.integers(1, MAX_ID))


ID_CHARS = "".join(chr(c) for c in range(0x21, 0x7F))


def make_id(serial, length, salt):
    head = "%d~" % serial
    rnd = random.Random(salt)
    body = "".join(rnd.choice(ID_CHARS) for _ in range(max(0, length)))
    s = (head + body)[:length]
    if len(s) < len(head):      # too short for the serial: a random id
        s = "".join(rnd.choice(ID_CHARS) for _ in range(length))
    return s


def pick(data, items):
    """One of ITEMS (None if empty), drawn the same way whatever their
    number, so that the draws do not depend on the broker's answers."""
    i = data.draw(st.integers(0, 1 << 20))
    return items[i % len(items)] if items else None


def variant(text, v):
    """One of the spellings of TEXT that normalize to the same string."""
    if v == 0:
        return unicodedata.normalize("NFC", text)
    if v == 1:
        return unicodedata.normalize("NFD", text)
    if v == 2:
        return text.replace("\n", "\r\n")
    return unicodedata.normalize("NFD", text).replace("\n", "\r")


def result_value(size, salt):
    """A result whose compact JSON is about SIZE bytes (exactly, for a
    string: the quotes count)."""
    if size <= 0:
        return None
    if size < 8:
        return salt % 1000
    if size < 64:
        return {"id": salt, "note": "x" * (size - 24)}
    return "%08x" % salt + "r" * (size - 10)


RESULT_SIZES = st.sampled_from([0, 1, 16, 100, 1000, 4096, 32768, 65535,
                                MAX_RESULT])
