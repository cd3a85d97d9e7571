"""The fast path of JSON ingest: a Numba byte scanner for nested lists of numbers.

It reads raw UTF-8 bytes and writes the numbers into one flat array and the
length of every list (with its depth) into two more, with no Python object per
number.  It understands exactly this subset of JSON, which is what ragged
numeric data looks like::

    value   := list | number | true | false | NaN | Infinity | -Infinity
    list    := '[' (value (',' value)*)? ']'
    number  := JSON's number grammar (no leading zeros, no '+', no bare '.')

with JSON whitespace between tokens.  It also enforces the nesting rules of
:func:`lodtool.from_nested` (every number at one depth, no list at or below it),
booleans never mixed with numbers, and the integer range policy.  Anything else
(strings, objects, ``null``, syntax errors, irregular nesting, ...) stops the
scan with status ``FALLBACK``; :mod:`lodtool.io.json` then runs its general path
on the same input, which gives the same result or a positioned error message.

Numbers are exact: integers are parsed with overflow detection, floats are
correctly rounded (the value Python's ``float()`` gives).  Floats use Clinger's
fast path (at most 2**53 and a power of ten up to 22), else the Eisel-Lemire
algorithm (a 128-bit product with a table of powers of five), else, for the
rare inputs those cannot decide (subnormals, more than 19 significant digits
that straddle a rounding boundary), Python's ``float()`` on the token text.

Its kernels compile on first use (:mod:`lodtool._jit`); :mod:`lodtool.io.json` imports it only
when the fast path runs.

>>> import numpy as np
>>> r = scan_bytes(b"[[1,2],[3]]\\n[[4.5]]\\n", jsonl=True)
>>> r.status == DONE, r.values().tolist(), r.lengths.tolist(), r.depths.tolist()
(True, [1.0, 2.0, 3.0, 4.5], [2, 1, 2, 1, 1], [2, 2, 1, 2, 1])
"""

from __future__ import annotations

import math

import numpy as np
from .._jit import intrinsic, kernel

#: scan statuses
DONE = 0        # every complete item up to the end of the buffer was scanned
NEED_MORE = 1   # an item runs past the end of the buffer (JSON documents read in pieces)
FALLBACK = 2    # something this scanner does not take: let the general path handle (or explain) it

#: value modes of one scan
MODE_NONE, MODE_INT, MODE_FLOAT, MODE_BOOL = 0, 1, 2, 3
#: value classes that persist across chunks (booleans and numbers never mix)
CLS_NONE, CLS_NUMBER, CLS_BOOL = 0, 1, 2
#: what an explicit dtype lets through: 0 int64 range only, 1 uint64 range too, 2 any integer (stored as float)
TARGET_DEFAULT, TARGET_UINT64, TARGET_FLOAT = 0, 1, 2

#: state slots (an int64 array carried from call to call)
POS, OUTER, LEAF, MAXLIST, CLS, MODE, N_VAL, N_LIST, N_SLOW, N_BIG, HAS_NEG, ITEMS, NEWLINES, ERRPOS, TARGET, \
    ERRCODE, DEPTH, EXPECT, RESUME, TAIL, ERRDEPTH = range(21)
STATE_SIZE = 21
#: DEPTH and EXPECT hold an item left open by a scan with RESUME set (its lists' counts stay in the scanner's
#: ``cnt``; EXPECT: 0 a value, 1 a value or ']', 2 ',' or ']'); TAIL: a JSON Lines item ended, blanks up to its
#: newline follow; ERRDEPTH and EXPECT: where a scan stopped with an error

#: the outer list of a JSON document
OUT_START, OUT_FIRST, OUT_NEXT, OUT_COMMA, OUT_END = range(5)

#: LoD levels plus element dimensions at most (deeper input is refused by both paths)
MAX_LEVELS = 256

#: fallback reasons (for tests and debugging; the general path words the messages)
E_SYNTAX, E_TRUNCATED, E_NEST, E_MIX, E_RANGE, E_DEEP, E_LONG = 1, 2, 3, 4, 5, 6, 7

#: longest integer token the scanner takes (longer ones go to the general path, which words their error); a float
#: token of any length is read here, keeping only what decides its value
MAX_TOKEN = 1 << 12
_SPAN_SHIFT = 40
#: the longest token length a span records; a longer token's end is found again from its start
_MAX_SPAN = (1 << (63 - _SPAN_SHIFT)) - 1
#: significant digits that decide a double: 767 can matter, the rest only by being all zeros or not
SIGNIFICANT_DIGITS = 800
#: a slow token is read back this many bytes at a time (bounded memory, whatever its length)
TOKEN_PIECE = 1 << 20


def _power_of_five_table() -> np.ndarray:
    """128-bit truncated powers of five, 5**q for q in -342..308, as (high, low) uint64 pairs.

    This is the table of the Eisel-Lemire algorithm (as in fast_float), computed
    here with exact integer arithmetic.
    """
    out = []
    for q in range(-342, 0):
        power5 = 5 ** -q
        z = power5.bit_length()
        if (1 << (z - 1)) == power5:  # pragma: no cover - 5**k is never a power of two
            z -= 1
        if q >= -27:
            c = 2 ** (z + 127) // power5 + 1
        else:
            c = 2 ** (2 * z + 128) // power5 + 1
            c >>= max(c.bit_length() - 128, 0)  # halved until below 2**128, in one shift
        out.append(c)
    for q in range(0, 309):
        power5 = 5 ** q
        bits = power5.bit_length()  # scaled into [2**127, 2**128), in one shift
        out.append(power5 << (128 - bits) if bits < 128 else power5 >> (bits - 128))
    flat = []
    for c in out:
        flat.append(c >> 64)
        flat.append(c & ((1 << 64) - 1))
    return np.array(flat, dtype=np.uint64)


_POW5 = _power_of_five_table()
_POW10 = np.array([10.0 ** k for k in range(23)], dtype=np.float64)  # exact doubles

_U64 = np.uint64
_M32 = np.uint64(0xFFFFFFFF)
_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_INT64_MAX_U = np.uint64(0x7FFFFFFFFFFFFFFF)
_INT64_MIN_MAG = np.uint64(0x8000000000000000)
_TWO53 = np.uint64(1 << 53)
_INF = math.inf
#: an exponent is read up to about this size: past any token's own digit count (a buffer holds under 2**40 bytes),
#: so the value is then 0 or infinite either way
_EXPONENT_CAP = 1 << 50


@intrinsic
def _bits_to_double(typingctx, bits):
    """Reinterpret uint64 bits as a float64 (no allocation)."""
    from numba import types

    sig = types.float64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return sig, codegen


@kernel(inline="always")
def _mul128(a, b):
    """(high, low) 64-bit halves of the 128-bit product of two uint64."""
    a_lo = a & _M32
    a_hi = a >> _U64(32)
    b_lo = b & _M32
    b_hi = b >> _U64(32)
    p0 = a_lo * b_lo
    p1 = a_lo * b_hi
    p2 = a_hi * b_lo
    p3 = a_hi * b_hi
    mid = (p0 >> _U64(32)) + (p1 & _M32) + (p2 & _M32)
    hi = p3 + (p1 >> _U64(32)) + (p2 >> _U64(32)) + (mid >> _U64(32))
    lo = (mid << _U64(32)) | (p0 & _M32)
    return hi, lo


@intrinsic
def _clz64(typingctx, x):
    """Leading zero bits of a uint64 (LLVM's ctlz: one instruction)."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        return builder.ctlz(args[0], ir.Constant(ir.IntType(1), 0))

    return types.int64(types.uint64), codegen


@kernel
def _eisel_lemire(w, q, table):
    """The double nearest to ``w * 10**q`` (w > 0): (True, value), or (False, 0.0) when undecided."""
    if q < -342:
        return True, 0.0
    if q > 308:
        return True, _INF
    lz = _clz64(w)
    w = w << _U64(lz)
    idx = 2 * (q + 342)
    hi, lo = _mul128(w, table[idx])
    if (hi & _U64(0x1FF)) == _U64(0x1FF):
        hi2, lo2 = _mul128(w, table[idx + 1])
        new_lo = lo + hi2
        if new_lo < lo:
            hi += _U64(1)
        lo = new_lo
    if lo == _ONES and (q < -27 or q > 55):
        return False, 0.0
    upperbit = np.int64(hi >> _U64(63))
    shift = _U64(upperbit + 9)
    mantissa = hi >> shift
    power2 = (((152170 + 65536) * q) >> 16) + 63 + upperbit - lz + 1023
    if power2 <= 0:  # subnormal: leave it to float()
        return False, 0.0
    if lo <= _U64(1) and -4 <= q <= 23 and (mantissa & _U64(3)) == _U64(1):
        if (mantissa << shift) == hi:
            mantissa &= ~_U64(1)
    mantissa += mantissa & _U64(1)
    mantissa >>= _U64(1)
    if mantissa >= _U64(2 << 52):
        mantissa = _U64(1 << 52)
        power2 += 1
    mantissa &= ~_U64(1 << 52)
    if power2 >= 0x7FF:
        return True, _INF
    return True, _bits_to_double(mantissa | (_U64(power2) << _U64(52)))


@kernel(inline="always")
def _decimal_to_double(w, e10, truncated, table, pow10):
    """(ok, value) for ``w * 10**e10`` (w is the first 19 significant digits)."""
    if w == _U64(0):
        return True, 0.0
    if not truncated and -22 <= e10 <= 22 and w <= _TWO53:
        f = np.float64(w)
        if e10 >= 0:
            return True, f * pow10[e10]
        return True, f / pow10[-e10]
    ok, f = _eisel_lemire(w, e10, table)
    if not ok:
        return False, 0.0
    if truncated:  # the true value lies between w and w+1 (times 10**e10): both must round alike
        ok2, f2 = _eisel_lemire(w + _U64(1), e10, table)
        if not ok2 or f2 != f:
            return False, 0.0
    return True, f


@kernel(inline="always")
def _is_ws(c):
    return c == 32 or c == 9 or c == 13 or c == 10


@kernel(inline="always")
def _skip_blank_lines(buf, pos, end, newlines):
    """Past the spaces, tabs, ``\\r`` and newlines between JSON Lines items: (pos, newlines)."""
    while pos < end:
        c = buf[pos]
        if c == 10:
            newlines += 1
        elif c != 32 and c != 9 and c != 13:
            break
        pos += 1
    return pos, newlines


@kernel(inline="always")
def _line_tail(buf, pos, end):
    """Past the blanks after a JSON Lines item: ``(pos, err)``, ``err`` if something other than a newline follows."""
    while pos < end and (buf[pos] == 32 or buf[pos] == 9 or buf[pos] == 13):
        pos += 1
    return pos, E_SYNTAX if pos < end and buf[pos] != 10 else 0


@kernel
def _next_document_item(buf, pos, end, final, outer, newlines):
    """Past whitespace and the batch's own ``[``, ``,`` and ``]`` to the next item of a JSON document.

    Returns ``(pos, outer, newlines, found, err)``: ``found`` when an item
    starts at ``pos``; otherwise the buffer ended (``err`` 0, or
    ``E_TRUNCATED`` at the end of the input) or the batch breaks the grammar.
    """
    while True:
        while pos < end and _is_ws(buf[pos]):
            if buf[pos] == 10:
                newlines += 1
            pos += 1
        if pos >= end:
            return pos, outer, newlines, False, E_TRUNCATED if final and outer != OUT_END else 0
        c = buf[pos]
        if outer == OUT_START:
            if c != 91:
                return pos, outer, newlines, False, E_SYNTAX
            outer = OUT_FIRST
        elif outer == OUT_FIRST and c == 93:
            outer = OUT_END
        elif outer == OUT_NEXT:
            if c == 44:
                outer = OUT_COMMA
            elif c == 93:
                outer = OUT_END
            else:
                return pos, outer, newlines, False, E_SYNTAX
        elif outer == OUT_END:
            return pos, outer, newlines, False, E_SYNTAX
        else:  # OUT_FIRST or OUT_COMMA: a value starts here
            return pos, outer, newlines, True, 0
        pos += 1


@kernel(inline="always")
def _plain_integers(buf, pos, end, iv, fv, n_val, mode, has_neg, count):
    """The hot loop: a run of plain integers and commas (``12,-3,4]``) right inside a list at the leaf depth.

    Anything else (a space, a float, a long integer, the end of the buffer)
    stops it, for the state machine to take over.  Returns ``(pos, n_val,
    mode, has_neg, count, any, closed)``: ``any`` when it stored a value,
    ``closed`` when it stopped at the list's ``]`` (else after a ``,`` or
    before what it does not take).
    """
    stored = False
    while pos < end:
        q = pos
        neg = buf[q] == 45
        if neg:
            q += 1
            if q >= end:
                break
        d = np.int64(buf[q]) - 48
        if d < 0 or d > 9:
            break
        v = d
        q += 1
        if d != 0:
            while q < end:
                d = np.int64(buf[q]) - 48
                if d < 0 or d > 9:
                    break
                v = v * 10 + d
                q += 1
            if q - pos > 18:
                break
        if q >= end:
            break
        c = buf[q]
        if c != 44 and c != 93:
            break
        if neg:
            v = -v
            if v < 0:
                has_neg = 1
        if mode == MODE_FLOAT:
            fv[n_val] = np.float64(v)
        else:
            iv[n_val] = v
            mode = MODE_INT
        stored = True
        n_val += 1
        count += 1
        if c == 93:
            return q, n_val, mode, has_neg, count, stored, True
        pos = q + 1
    return pos, n_val, mode, has_neg, count, stored, False


@kernel
def _boolean(buf, pos, end):
    """The literal ``true``/``false`` at ``pos``: ``(length, value, err, incomplete)``."""
    c = buf[pos]
    n = 4 if c == 116 else 5
    if pos + n > end:
        return n, 0, 0, True
    if c == 116:
        good = buf[pos + 1] == 114 and buf[pos + 2] == 117 and buf[pos + 3] == 101
    else:
        good = buf[pos + 1] == 97 and buf[pos + 2] == 108 and buf[pos + 3] == 115 and buf[pos + 4] == 101
    return n, 1 if c == 116 else 0, 0 if good else E_SYNTAX, False


@kernel(inline="always")
def _number_token(buf, pos, end, final):
    """The number (or NaN, Infinity, -Infinity) at ``pos``, in pieces for :func:`_decimal_to_double`.

    Returns ``(end, w, e10, truncated, is_float, neg, special, is_special,
    err, incomplete)``: ``w`` holds the first 19 significant digits and the
    value is ``w * 10**e10`` (``special`` for the literals); ``incomplete``
    when the token may go on past the buffer.
    """
    neg = False
    p = pos
    w = _U64(0)
    e10 = 0
    truncated = False
    is_float = False
    special = 0.0
    is_special = False
    c = buf[p]
    if c == 45:
        neg = True
        p += 1
        if p >= end:
            return p, w, e10, truncated, is_float, neg, special, is_special, 0, True
        c = buf[p]
    if c == 78 or c == 73:  # NaN / Infinity
        word_len = 3 if c == 78 else 8
        if c == 78 and neg:
            return p, w, e10, truncated, is_float, neg, special, is_special, E_SYNTAX, False
        if p + word_len > end:
            return p, w, e10, truncated, is_float, neg, special, is_special, 0, True
        if c == 78:
            good = buf[p + 1] == 97 and buf[p + 2] == 78
            special = np.nan
        else:
            good = (buf[p + 1] == 110 and buf[p + 2] == 102 and buf[p + 3] == 105 and buf[p + 4] == 110
                    and buf[p + 5] == 105 and buf[p + 6] == 116 and buf[p + 7] == 121)
            special = -_INF if neg else _INF
        if not good:
            return p, w, e10, truncated, is_float, neg, special, is_special, E_SYNTAX, False
        return p + word_len, w, e10, truncated, True, neg, special, True, 0, p + word_len >= end and not final
    if c < 48 or c > 57:
        return p, w, e10, truncated, is_float, neg, special, is_special, E_SYNTAX, False
    nd = 0
    if c == 48:
        p += 1
        if p < end and 48 <= buf[p] <= 57:
            return p, w, e10, truncated, is_float, neg, special, is_special, E_SYNTAX, False  # leading zero
    else:
        while p < end:
            d = buf[p]
            if d < 48 or d > 57:
                break
            if nd < 19:
                w = w * _U64(10) + _U64(d - 48)
                nd += 1
            else:
                e10 += 1
                if d != 48:
                    truncated = True
            p += 1
    if p < end and buf[p] == 46:  # '.'
        is_float = True
        p += 1
        start_frac = p
        while p < end:
            d = buf[p]
            if d < 48 or d > 57:
                break
            if nd == 0 and d == 48:
                e10 -= 1
            elif nd < 19:
                w = w * _U64(10) + _U64(d - 48)
                nd += 1
                e10 -= 1
            elif d != 48:
                truncated = True
            p += 1
        if p == start_frac:
            return p, w, e10, truncated, is_float, neg, special, is_special, 0 if p >= end else E_SYNTAX, p >= end
    if p < end and (buf[p] == 101 or buf[p] == 69):  # 'e' / 'E'
        is_float = True
        p += 1
        eneg = False
        if p < end and (buf[p] == 43 or buf[p] == 45):
            eneg = buf[p] == 45
            p += 1
        start_exp = p
        ex = 0
        while p < end:
            d = buf[p]
            if d < 48 or d > 57:
                break
            if ex < _EXPONENT_CAP:  # past it the value is 0 or infinite whatever the digits say
                ex = ex * 10 + (d - 48)
            p += 1
        if p == start_exp:
            return p, w, e10, truncated, is_float, neg, special, is_special, 0 if p >= end else E_SYNTAX, p >= end
        e10 += -ex if eneg else ex
    return p, w, e10, truncated, is_float, neg, special, is_special, 0, p >= end and not final


@kernel(inline="always")
def _store_number(iv, fv, slow, spans, n_val, mode, n_slow, n_big, has_neg, target, pos, p, w, e10, truncated,
                  is_float, neg, special, is_special, table, pow10):
    """Store the number token ``buf[pos:p]`` (in :func:`_number_token`'s pieces) as value ``n_val``.

    An integer is stored as int64, else (by target) as uint64 bits, a float, or
    left to Python (``slow``/``spans``); the first float switches the scan to
    float mode, converting the values before it in place.  Returns ``(mode,
    n_slow, n_big, has_neg, err)``.
    """
    if not is_float:
        # an integer: int64, else (by target) uint64 bits, a float, or the general path
        if e10 == 0 and not neg and w <= _INT64_MAX_U:
            ival = np.int64(w)
            big = 0
        elif e10 == 0 and neg and w <= _INT64_MIN_MAG:
            ival = -np.int64(w - _U64(1)) - 1
            big = 0
        elif target == TARGET_UINT64 and not neg:
            ival = np.int64(0)
            big = 1 if e10 == 0 else 2  # 1: fits uint64 (stored as bits), 2: decide in Python
        elif target == TARGET_FLOAT:
            is_float = True
            big = 0
            ival = np.int64(0)
        else:
            return mode, n_slow, n_big, has_neg, E_RANGE
        if not is_float:
            if neg and ival < 0:
                has_neg = 1
            if mode == MODE_FLOAT:
                if big != 0:
                    return mode, n_slow, n_big, has_neg, E_RANGE  # beyond int64 among floats: the general path decides
                fv[n_val] = np.float64(ival)
            else:
                mode = MODE_INT
                if big == 1:
                    iv[n_val] = np.int64(w)  # the uint64 bits
                    n_big += 1
                elif big == 2:
                    slow[n_slow] = n_val
                    spans[n_slow] = pos | (min(p - pos, _MAX_SPAN) << _SPAN_SHIFT)
                    n_slow += 1
                    n_big += 1
                    iv[n_val] = 0
                else:
                    iv[n_val] = ival
            return mode, n_slow, n_big, has_neg, 0
    # a float: switch the scan to float mode (converting earlier integers in place)
    if mode != MODE_FLOAT:
        if n_big != 0:
            return mode, n_slow, n_big, has_neg, E_RANGE
        for k in range(n_val):
            fv[k] = np.float64(iv[k])
        mode = MODE_FLOAT
    if is_special:
        fv[n_val] = special
    else:
        ok, f = _decimal_to_double(w, e10, truncated, table, pow10)
        if ok and f == _INF:
            return mode, n_slow, n_big, has_neg, E_RANGE  # beyond float64: the general path says where
        if ok:
            fv[n_val] = -f if neg else f
        else:
            slow[n_slow] = n_val
            spans[n_slow] = pos | (min(p - pos, _MAX_SPAN) << _SPAN_SHIFT)
            n_slow += 1
            fv[n_val] = 0.0
    return mode, n_slow, n_big, has_neg, 0


@kernel
def scan(buf, end, jsonl, final, st, iv, lens, ldep, slow, spans, cnt, iline, table, pow10):
    """Scan ``buf[st[POS]:end]``; outputs go to the arrays, counters and the new position to ``st``.

    ``iv`` receives every value as int64 bits (a float64 view of it once a float
    is seen), ``lens``/``ldep`` every list's length and depth (close order),
    ``slow``/``spans`` the indices and token spans left to Python's ``float()``,
    ``iline`` the number of newlines before each top-level item.  Returns the
    status (``DONE``, ``NEED_MORE``, ``FALLBACK``).  The tokens are read by the
    kernels above it: Numba inlines the hot ones here and calls the cold ones
    (a JSON document's own brackets and commas, booleans).
    """
    fv = iv.view(np.float64)
    pos = st[POS]
    outer = st[OUTER]
    leaf = st[LEAF]
    maxlist = st[MAXLIST]
    cls = st[CLS]
    mode = st[MODE]
    n_val = st[N_VAL]
    n_list = st[N_LIST]
    n_slow = st[N_SLOW]
    n_big = st[N_BIG]
    has_neg = st[HAS_NEG]
    items = st[ITEMS]
    newlines = st[NEWLINES]
    target = st[TARGET]
    resumable = st[RESUME] != 0
    open_depth = st[DEPTH]  # an item a previous scan left open goes on here
    status = DONE
    err = 0
    depth = 1
    expect = 0  # 0: a value, 1: a value or ']', 2: ',' or ']'
    open_at = 0
    if st[TAIL] != 0:  # after an item: its line's end
        expect = 2
        pos, err = _line_tail(buf, pos, end)
        if err != 0:
            status = FALLBACK
        st[TAIL] = 1 if pos >= end and err == 0 else 0
    while err == 0:
        keep_open = resumable
        if open_depth != 0:
            depth = open_depth
            expect = st[EXPECT]
            open_depth = 0
            keep_open = True  # its lists' counts live on in cnt: never roll it back
        else:
            # -- between top-level items ---------------------------------------------------------
            if jsonl:
                pos, newlines = _skip_blank_lines(buf, pos, end, newlines)
                if pos >= end:
                    break
            else:
                pos, outer, newlines, found, err = _next_document_item(buf, pos, end, final, outer, newlines)
                if not found:
                    if err != 0:
                        status = FALLBACK
                    break
            depth = 1  # one top-level item, enclosed by the batch
            expect = 0
        item_start = pos
        iline[items] = newlines
        c_val = n_val
        c_list = n_list
        c_slow = n_slow
        c_big = n_big
        c_neg = has_neg
        c_leaf = leaf
        c_maxlist = maxlist
        c_cls = cls
        c_mode = mode
        c_newlines = newlines
        incomplete = False
        token_start = pos
        counted = False  # whether cnt counts the value at token_start
        while True:
            if pos >= end:
                incomplete = True
                token_start = pos
                counted = False
                break
            c = buf[pos]
            if c == 32 or c == 9 or c == 13:
                pos += 1
                continue
            if c == 10:
                if jsonl:
                    err = E_TRUNCATED
                    break
                newlines += 1
                pos += 1
                continue
            if expect == 2 or (expect == 1 and c == 93):
                if c == 44 and expect == 2:
                    expect = 0
                    pos += 1
                    continue
                if c == 93:
                    lens[n_list] = cnt[depth]
                    ldep[n_list] = depth - 1
                    n_list += 1
                    depth -= 1
                    pos += 1
                    expect = 2
                    if depth == 1:
                        break
                    continue
                err = E_SYNTAX
                break
            # a value starts here, enclosed by `depth` brackets
            token_start = pos
            counted = depth >= 2
            if counted:
                cnt[depth] += 1
            if c == 91:
                if leaf != 0 and depth >= leaf:
                    err = E_NEST
                    break
                if depth > MAX_LEVELS:
                    err = E_DEEP
                    break
                if depth > maxlist:
                    maxlist = depth
                depth += 1
                cnt[depth] = 0
                expect = 1
                pos += 1
                if depth == leaf and cls != CLS_BOOL:
                    pos, n_val, mode, has_neg, cnt[depth], stored, closed = _plain_integers(
                        buf, pos, end, iv, fv, n_val, mode, has_neg, cnt[depth])
                    if stored:
                        cls = CLS_NUMBER
                        expect = 2 if closed else 0
                continue
            # a scalar: every scalar sits at the leaf depth, below every list
            if leaf == 0:
                if maxlist >= depth:
                    err = E_NEST
                    break
                leaf = depth
            elif depth != leaf:
                err = E_NEST
                break
            if c == 116 or c == 102:  # true / false
                n, value, err, incomplete = _boolean(buf, pos, end)
                if incomplete or err != 0:
                    break
                if cls == CLS_NUMBER:
                    err = E_MIX
                    break
                cls = CLS_BOOL
                mode = MODE_BOOL
                iv[n_val] = value
                n_val += 1
                pos += n
                expect = 2
                if depth == 1:
                    break
                continue
            p, w, e10, truncated, is_float, neg, special, is_special, err, incomplete = _number_token(
                buf, pos, end, final)
            if incomplete or err != 0:
                break
            if p - pos > MAX_TOKEN and not is_float:
                err = E_LONG
                break
            # -- store the value -------------------------------------------------------------------
            if cls == CLS_BOOL:
                err = E_MIX
                break
            cls = CLS_NUMBER
            mode, n_slow, n_big, has_neg, err = _store_number(
                iv, fv, slow, spans, n_val, mode, n_slow, n_big, has_neg, target, pos, p, w, e10, truncated, is_float,
                neg, special, is_special, table, pow10)
            if err != 0:
                break
            n_val += 1
            pos = p
            expect = 2
            if depth == 1:
                break
        if err != 0:
            status = FALLBACK
            break
        if incomplete:
            if final:
                status = FALLBACK
                err = E_TRUNCATED
                break
            if keep_open:
                # stop before the token the buffer cuts (a value counted at its start is counted again)
                pos = token_start
                if counted:
                    cnt[depth] -= 1
                open_at = depth
                status = NEED_MORE
                break
            # roll back to the start of the item; the caller reads more and scans again
            pos = item_start
            n_val = c_val
            n_list = c_list
            n_slow = c_slow
            n_big = c_big
            has_neg = c_neg
            leaf = c_leaf
            maxlist = c_maxlist
            cls = c_cls
            if not (c_mode == MODE_INT and mode == MODE_FLOAT) and not (c_mode == MODE_NONE and mode == MODE_FLOAT):
                mode = c_mode
            newlines = c_newlines
            status = NEED_MORE
            break
        items += 1
        if jsonl:
            pos, err = _line_tail(buf, pos, end)
            if err != 0:
                status = FALLBACK
                break
            if pos >= end and not final:
                st[TAIL] = 1
        else:
            outer = OUT_NEXT
    st[POS] = pos
    st[OUTER] = outer
    st[LEAF] = leaf
    st[MAXLIST] = maxlist
    st[CLS] = cls
    st[MODE] = mode
    st[N_VAL] = n_val
    st[N_LIST] = n_list
    st[N_SLOW] = n_slow
    st[N_BIG] = n_big
    st[HAS_NEG] = has_neg
    st[ITEMS] = items
    st[NEWLINES] = newlines
    st[ERRPOS] = pos
    st[ERRCODE] = err
    st[DEPTH] = open_at
    st[EXPECT] = expect
    st[ERRDEPTH] = depth
    return status


@kernel
def count_structure(buf, start, end):
    """(``[`` count, ``,`` count, newline count) of ``buf[start:end]``: bounds for the output sizes."""
    n_open = 0
    n_comma = 0
    n_line = 0
    for i in range(start, end):
        c = buf[i]
        n_open += c == 91
        n_comma += c == 44
        n_line += c == 10
    return n_open, n_comma, n_line


@kernel
def squeeze_blanks(buf, n, min_run, gap_at, gap_len):
    """Squeeze each run of at least ``min_run`` spaces, tabs and ``\\r`` in ``buf[:n]`` to one space, in place.

    JSON ignores the run's length, so a line padded with gigabytes of blanks
    need not be held whole.  Returns ``(length, gaps)``: the new length, and
    how many gaps were written to ``gap_at`` (the offset, after squeezing, of
    the byte that followed the run) and ``gap_len`` (the bytes dropped there);
    both need room for ``n // min_run + 1`` entries.
    """
    w = 0
    i = 0
    g = 0
    while i < n:
        c = buf[i]
        if c != 32 and c != 9 and c != 13:
            buf[w] = c
            w += 1
            i += 1
            continue
        j = i
        while j < n and (buf[j] == 32 or buf[j] == 9 or buf[j] == 13):
            j += 1
        if j - i >= min_run:
            buf[w] = 32
            w += 1
            gap_at[g] = w
            gap_len[g] = j - i - 1
            g += 1
        else:
            for k in range(i, j):
                buf[w] = buf[k]
                w += 1
        i = j
    return w, g


#: what came before the place :func:`first_syntax_problem` stops at
PREV_START, PREV_OPEN, PREV_COMMA, PREV_VALUE = range(4)


@kernel
def first_syntax_problem(buf):
    """Where ``buf`` stops being one JSON value made of lists and scalars, in O(1) memory.

    Returns ``(position, depth, previous)``: the start of the first token that
    breaks the grammar (or ``len(buf)`` if the text ends too early; ``-1`` if
    there is no problem), the number of lists open there, and what came before
    it (``PREV_*``).  Tokens are read as :func:`scan` reads them; strings,
    objects and null count as problems (the caller decides what to make of them).
    """
    n = buf.shape[0]
    depth = 0
    prev = PREV_START
    i = 0
    while i < n:
        c = buf[i]
        if c == 32 or c == 9 or c == 10 or c == 13:
            i += 1
            continue
        if prev == PREV_VALUE:  # after a value: ',' or ']' inside a list, nothing at the top
            if depth == 0:
                return i, depth, prev
            if c == 44:
                prev = PREV_COMMA
                i += 1
                continue
            if c == 93:
                depth -= 1
                i += 1
                continue
            return i, depth, prev
        # a value is expected (or, right after '[', a ']')
        if c == 91:
            depth += 1
            prev = PREV_OPEN
            i += 1
            continue
        if c == 93 and prev == PREV_OPEN:
            depth -= 1
            prev = PREV_VALUE
            i += 1
            continue
        if c == 116 or c == 102:  # true / false
            length, _, err, incomplete = _boolean(buf, i, n)
            end = i + length
        else:
            end, _, _, _, _, _, _, _, err, incomplete = _number_token(buf, i, n, True)
        if err != 0 or incomplete:
            return i, depth, prev
        i = end
        prev = PREV_VALUE
    if prev == PREV_VALUE and depth == 0:
        return -1, depth, prev
    return n, depth, prev


#: blocks above this size get output arrays sized by an exact count, not by the worst case
_COUNT_ABOVE = 32 << 20


class Scanner:
    """Runs :func:`scan` over blocks of one input, reusing its scratch arrays from block to block.

    After :meth:`scan`, :meth:`values` hands over the block's values; the other
    outputs are views to copy (or drop) before the next block.
    """

    def __init__(self, jsonl: bool, target: int = TARGET_DEFAULT):
        self.jsonl = bool(jsonl)
        self.state = new_state(target)
        if not jsonl:
            self.state[OUTER] = OUT_START
        self.cap = 0
        self.iv: np.ndarray | None = None
        self.cnt = np.zeros(MAX_LEVELS + 3, dtype=np.int64)
        self.error = None

    def _ensure(self, buf: np.ndarray, start: int, end: int) -> None:
        span = end - start
        if span > _COUNT_ABOVE:
            n_open, n_comma, n_line = count_structure(buf, start, end)
            cap = int(n_open + n_comma + n_line) + 2
        else:
            cap = span // 2 + 2
        if self.iv is None or self.iv.shape[0] < cap:
            self.iv = np.empty(cap, dtype=np.int64)  # handed over by values(), so sized per block
        if cap <= self.cap:
            return
        cap = max(cap, min(2 * self.cap, span // 2 + 2))
        self.lens = np.empty(cap, dtype=np.int64)
        self.ldep = np.empty(cap, dtype=np.int16)
        self.slow = np.empty(cap, dtype=np.int64)
        self.spans = np.empty(cap, dtype=np.int64)
        self.iline = np.empty(cap, dtype=np.int64)
        self.cap = cap

    def scan(self, buf: np.ndarray, start: int, end: int, final: bool = True, resume: bool = False) -> int:
        """Scan ``buf[start:end]``; returns DONE, NEED_MORE or FALLBACK (see :func:`scan`).

        With ``resume`` (and always for an item a scan left open) NEED_MORE stops
        before the token the end cuts and leaves the item open: the outputs hold
        its values and lists so far, and the next scan, of the text from
        ``state[POS]`` on, goes on with it (:attr:`is_open`).  Otherwise an item
        that runs past ``end`` is rolled back whole.
        """
        st = self.state
        reset_chunk(st)
        st[POS] = start
        st[RESUME] = resume
        self._ensure(buf, start, end)
        status = scan(buf, end, self.jsonl, bool(final), st, self.iv, self.lens, self.ldep, self.slow, self.spans,
                      self.cnt, self.iline, _POW5, _POW10)
        self.error = None
        if status != FALLBACK and st[N_SLOW]:
            self.error = _finish_slow(buf, st, self.iv, self.slow[:st[N_SLOW]], self.spans[:st[N_SLOW]])
            if self.error is not None:
                status = FALLBACK
        if status != FALLBACK and st[N_BIG] and st[HAS_NEG]:
            self.error = E_RANGE  # integers above int64 and negative ones: no integer dtype holds both
            status = FALLBACK
        return status

    def release(self, above: int = 1 << 20) -> None:
        """Free the scratch arrays if they hold more than ``above`` entries.

        After a FALLBACK the general path parses the same text: a block with
        one huge line must not keep its partial outputs alive meanwhile.
        """
        if self.cap > above or (self.iv is not None and self.iv.shape[0] > above):
            self.iv = None
            self.lens = self.ldep = self.slow = self.spans = self.iline = None
            self.cap = 0

    @property
    def is_open(self) -> bool:
        """Whether the last scan stopped inside an item (whose outputs so far it holds)."""
        return bool(self.state[DEPTH])

    def values(self) -> np.ndarray:
        """The block's values with their natural dtype: int64 (uint64 with N_BIG), float64 or bool.

        The array is handed over (the next block gets a new one), so it stays valid.
        """
        n = int(self.state[N_VAL])
        mode = int(self.state[MODE])
        if mode == MODE_NONE:
            return np.zeros(0, dtype=np.float64)  # no values: from_nested's dtype for empty data
        if mode == MODE_BOOL:
            return self.iv[:n].astype(np.bool_)
        iv, self.iv = self.iv, None
        if mode == MODE_FLOAT:
            return iv[:n].view(np.float64)
        return iv[:n].view(np.uint64) if self.state[N_BIG] else iv[:n]

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Views of every list's length and depth (close order); valid until the next scan."""
        n = int(self.state[N_LIST])
        return self.lens[:n], self.ldep[:n]

    def item_newlines(self) -> np.ndarray:
        """Newlines before each top-level item of the block (a view; valid until the next scan)."""
        return self.iline[:int(self.state[ITEMS])]


class ScanResult:
    """The outputs of one :func:`scan_bytes` call."""

    __slots__ = ("status", "state", "_values", "lengths", "depths", "item_newlines", "error")

    def __init__(self, scanner: Scanner, status: int):
        self.status = status
        self.state = scanner.state
        self._values = scanner.values()
        lengths, depths = scanner.lengths()
        self.lengths, self.depths = lengths.copy(), depths.copy()
        self.item_newlines = scanner.item_newlines().copy()
        self.error = scanner.error

    def values(self) -> np.ndarray:
        return self._values


def new_state(target: int = TARGET_DEFAULT) -> np.ndarray:
    st = np.zeros(STATE_SIZE, dtype=np.int64)
    st[TARGET] = target
    return st


def reset_chunk(st: np.ndarray) -> None:
    """Zero the per-chunk counters; keep the structure (leaf, max list depth, value class, outer state) and, while
    an item is open, what its values so far decided (float mode, integers above int64 or below zero)."""
    for k in (POS, N_VAL, N_LIST, N_SLOW, ITEMS, NEWLINES, ERRPOS, ERRCODE):
        st[k] = 0
    if not st[DEPTH]:
        for k in (MODE, N_BIG, HAS_NEG):
            st[k] = 0


def scan_bytes(data, *, jsonl: bool, final: bool = True, end: int | None = None,
               target: int = TARGET_DEFAULT) -> ScanResult:
    """Scan a whole bytes-like object (or uint8 array) once; a convenience for tests and examples."""
    buf = data if isinstance(data, np.ndarray) else np.frombuffer(bytearray(data), dtype=np.uint8)
    scanner = Scanner(jsonl, target)
    status = scanner.scan(buf, 0, buf.shape[0] if end is None else end, final)
    return ScanResult(scanner, status)


def _finish_slow(buf: np.ndarray, st: np.ndarray, iv: np.ndarray, slow: np.ndarray, spans: np.ndarray):
    """Parse the tokens the scanner left to Python; returns an error code or None."""
    mask = (1 << _SPAN_SHIFT) - 1
    raw = buf.data if buf.flags.c_contiguous else memoryview(buf.tobytes())
    as_float = st[MODE] == MODE_FLOAT
    fv = iv.view(np.float64)
    uv = iv.view(np.uint64)
    for idx, span in zip(slow.tolist(), spans.tolist()):
        start, length = span & mask, span >> _SPAN_SHIFT
        if as_float:
            fv[idx] = float(significant_text(raw, start, len(raw) if length == _MAX_SPAN else start + length))
            if math.isinf(fv[idx]):
                st[ERRPOS] = start
                return E_RANGE
        else:  # a long integer for a uint64 target (at most MAX_TOKEN bytes)
            try:
                value = int(bytes(raw[start:start + length]))
            except ValueError:
                st[ERRPOS] = start
                return E_LONG
            if not 0 <= value <= 0xFFFFFFFFFFFFFFFF:
                st[ERRPOS] = start
                return E_RANGE
            uv[idx] = value
    return None


def significant_text(raw, start: int, stop: int) -> str:
    """The JSON number token at ``raw[start:]`` (it ends before ``stop`` or at its first byte that no number has)
    rewritten as :meth:`NumberText.text` does, read :data:`TOKEN_PIECE` bytes at a time.

    >>> significant_text(b"[-12.50e3]", 1, 10), significant_text(b"0.000" + b"9" * 900 + b",", 0, 906)[-6:]
    ('-0.1250e5', '991e-3')
    >>> float(significant_text(b"9007199254740993" + b"0" * 5000 + b"1e-5001", 0, 5023))
    9007199254740994.0
    """
    number = NumberText()
    pos = start
    while pos < stop:
        piece = bytes(raw[pos:min(pos + TOKEN_PIECE, stop)])
        if not piece or number.feed(piece) >= 0:  # the input ended with the token, or the token did
            break
        pos += len(piece)
    return number.text()


#: where a number's grammar stands (NumberText): nothing yet, '-', a lone 0, integer digits, '.', fraction digits,
#: 'e', the exponent's sign, exponent digits, broken
_N_START, _N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP, _N_BROKEN = range(10)
_N_COMPLETE = (_N_ZERO, _N_INT, _N_FRAC, _N_EXP)


class NumberText:
    """A JSON number token read in pieces of any size, keeping only what decides its value (bounded memory).

    :meth:`feed` takes the token's bytes in order (it ends at the first byte no
    number has); :meth:`text` is then the token with at most
    :data:`SIGNIFICANT_DIGITS` significant digits, a sticky ``1`` where nonzero
    digits follow them, and one exponent: the text Python's ``float()`` rounds
    to the same double as the whole token.  :attr:`valid` is the length of the
    token's longest prefix that is a JSON number (the whole token is one when it
    equals :attr:`length`).

    >>> n = NumberText()
    >>> n.feed(b"-12.5"), n.feed(b"0e3,"), n.text(), n.length, n.valid, n.is_integer
    (-1, 3, '-0.1250e5', 8, 8, False)
    >>> n = NumberText()
    >>> n.feed(b"012]"), n.valid
    (3, 1)
    """

    def __init__(self):
        self.digits: list[bytes] = []  # the significant digits kept
        self.kept = 0
        self.point = 0  # the decimal point's place, counted in significant digits (negative: zeros before the first)
        self.sticky = self.neg = False
        self.phase = 0  # 0: the integer part, 1: the fraction, 2: the exponent
        self.exp_neg = False
        self.exp_digits = b""
        self.length = 0  # bytes of the token so far
        self.valid = 0  # its longest prefix that is a JSON number
        self._state = _N_START

    @property
    def is_integer(self) -> bool:
        return self.phase == 0

    def feed(self, piece: bytes) -> int:
        """Read the next bytes of the token; returns where in ``piece`` it ended, or -1 if it may go on."""
        i, n = 0, len(piece)
        while i < n:
            c = piece[i]
            if 48 <= c <= 57:
                run = n - i - len(piece[i:].lstrip(b"0123456789"))
                self._digits(piece[i:i + run], self.length + i)
                i += run
                continue
            state = self._state
            if c == 45 and self.length + i == 0:
                self.neg = True
                self._state = _N_MINUS
            elif c == 46 and self.phase == 0:
                self.phase = 1
                self._state = _N_DOT if state in (_N_ZERO, _N_INT) else _N_BROKEN
            elif c in (101, 69) and self.phase < 2:
                self.phase = 2
                self._state = _N_E if state in (_N_ZERO, _N_INT, _N_FRAC) else _N_BROKEN
            elif c in (43, 45) and state == _N_E:
                self.exp_neg = c == 45
                self._state = _N_ESIGN
            else:  # the token ended
                self.length += i
                return i
            i += 1
        self.length += n
        return -1

    def _digits(self, chunk: bytes, at: int) -> None:
        state = self._state
        if state in (_N_START, _N_MINUS):
            if chunk[:1] == b"0":
                self._state = _N_ZERO if len(chunk) == 1 else _N_BROKEN
                self.valid = at + 1  # a leading zero: the number is the 0
            else:
                self._state = _N_INT
        elif state == _N_ZERO:
            self._state = _N_BROKEN
        elif state in (_N_DOT, _N_FRAC):
            self._state = _N_FRAC
        elif state in (_N_E, _N_ESIGN, _N_EXP):
            self._state = _N_EXP
        if self._state in _N_COMPLETE:
            self.valid = at + len(chunk)
        if self.phase == 2:
            self.exp_digits = (self.exp_digits + chunk).lstrip(b"0")[:20]  # 20 digits: past _EXPONENT_CAP already
            return
        if not self.kept:  # zeros before the first significant digit
            stripped = chunk.lstrip(b"0")
            if self.phase == 1:
                self.point -= len(chunk) - len(stripped)
            chunk = stripped
        if chunk:
            if self.phase == 0:
                self.point += len(chunk)
            room = SIGNIFICANT_DIGITS - self.kept
            self.digits.append(chunk[:room])
            self.kept += min(room, len(chunk))
            self.sticky = self.sticky or bool(chunk[room:].strip(b"0"))

    def text(self) -> str:
        sign = "-" if self.neg else ""
        if not self.kept:
            return f"{sign}0.0"
        exponent = int(self.exp_digits or b"0") * (-1 if self.exp_neg else 1) + self.point
        return f"{sign}0.{b''.join(self.digits).decode()}{'1' if self.sticky else ''}e{exponent}"


__all__ = ["scan", "scan_bytes", "squeeze_blanks", "first_syntax_problem", "Scanner", "ScanResult",
           "NumberText", "significant_text",
           "count_structure", "new_state", "reset_chunk", "DONE", "NEED_MORE", "FALLBACK", "MAX_LEVELS"]
