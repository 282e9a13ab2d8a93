"""Read chosen members of a zip archive (a wheel) that lives elsewhere, through a callable that returns a byte range:
vLLM wheels are hundreds of MB of compiled kernels around a few MB of Python, so fetching only the central directory
and the wanted members costs a few percent of the whole file.

Layout read (APPNOTE.TXT): End Of Central Directory record at the end (after an optional comment of up to 64 KiB);
for archives past 4 GiB or 65535 entries a zip64 locator just before it that points at the zip64 EOCD record; the
central directory gives every member's name, method, sizes, CRC and the offset of its local header, which is followed
by the (compressed) data.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

ReadRange = Callable[[int, int], bytes]
"""read(start, end) -> the bytes [start, end) of the archive."""

COALESCE_GAP = 256 * 1024
"""Members closer than this are fetched in one request: a request costs more than a few hundred KiB of transfer."""

_EOCD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"
_CENTRAL = 0x02014B50
_LOCAL = b"PK\x03\x04"


class ZipFormatError(ValueError):
    """The bytes are not a zip archive this reader understands (a one-line reason)."""


@dataclass(frozen=True)
class Entry:
    """One central-directory record: enough to find, decompress and check the member."""

    name: str
    method: int
    crc: int
    compressed: int
    size: int
    offset: int


def read_directory(read: ReadRange, length: int) -> tuple[list[Entry], int]:
    """The archive's entries in central-directory order and the central directory's offset (where member data
    ends)."""
    tail_len = min(length, 22 + 65535 + 20)
    tail = read(length - tail_len, length)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < 22:
        raise ZipFormatError("no end-of-central-directory record")
    _, _, _, _, count, cd_size, cd_offset, _ = struct.unpack("<4sHHHHIIH", tail[at:at + 22])
    if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        loc = at - 20
        if loc < 0 or tail[loc:loc + 4] != _ZIP64_LOCATOR:
            raise ZipFormatError("zip64 fields without a zip64 locator")
        (z64_offset,) = struct.unpack("<Q", tail[loc + 8:loc + 16])
        rec = read(z64_offset, z64_offset + 56)
        if rec[:4] != _ZIP64_EOCD:
            raise ZipFormatError("zip64 end-of-central-directory record not where the locator says")
        count, _, cd_size, cd_offset = struct.unpack("<QQQQ", rec[24:56])
    directory = read(cd_offset, cd_offset + cd_size)
    if len(directory) != cd_size:
        raise ZipFormatError("central directory cut short")
    return _parse_directory(directory, count), cd_offset


def _parse_directory(data: bytes, count: int) -> list[Entry]:
    entries: list[Entry] = []
    pos = 0
    while pos + 46 <= len(data) and len(entries) < count:
        (sig, _, _, flags, method, _, _, crc, csize, usize, name_len, extra_len, comment_len, _, _, _,
         offset) = struct.unpack("<IHHHHHHIIIHHHHHII", data[pos:pos + 46])
        if sig != _CENTRAL:
            raise ZipFormatError(f"bad central-directory record at {pos}")
        raw_name = data[pos + 46:pos + 46 + name_len]
        name = raw_name.decode("utf-8" if flags & 0x800 else "cp437")
        extra = data[pos + 46 + name_len:pos + 46 + name_len + extra_len]
        usize, csize, offset = _zip64_sizes(extra, usize, csize, offset)
        entries.append(Entry(name, method, crc, csize, usize, offset))
        pos += 46 + name_len + extra_len + comment_len
    return entries


def _zip64_sizes(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """Replace 0xFFFFFFFF fields by the zip64 extra field's values, in the order the format lists them."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack("<HH", extra[pos:pos + 4])
        if tag == 1:
            values = list(struct.unpack(f"<{size // 8}Q", extra[pos + 4:pos + 4 + (size // 8) * 8]))
            if usize == 0xFFFFFFFF and values:
                usize = values.pop(0)
            if csize == 0xFFFFFFFF and values:
                csize = values.pop(0)
            if offset == 0xFFFFFFFF and values:
                offset = values.pop(0)
        pos += 4 + size
    return usize, csize, offset


def spans(wanted: Iterable[Entry], ends: dict[int, int], gap: int = COALESCE_GAP) -> list[tuple[int, int]]:
    """Byte ranges covering each wanted member's local header and data (up to where the next member starts, as the
    local header's extra field has a length the central directory does not give), merged when closer than `gap`."""
    out: list[tuple[int, int]] = []
    for entry in sorted(wanted, key=lambda e: e.offset):
        start, end = entry.offset, ends[entry.offset]
        if out and start - out[-1][1] < gap:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def member_data(entry: Entry, blob: bytes) -> bytes:
    """The member's uncompressed bytes from `blob`, which starts at its local header; checked against its CRC."""
    if blob[:4] != _LOCAL:
        raise ZipFormatError(f"{entry.name}: no local header at {entry.offset}")
    name_len, extra_len = struct.unpack("<HH", blob[26:30])
    start = 30 + name_len + extra_len
    raw = blob[start:start + entry.compressed]
    if len(raw) != entry.compressed:
        raise ZipFormatError(f"{entry.name}: data cut short")
    if entry.method == 0:
        data = raw
    elif entry.method == 8:
        inflater = zlib.decompressobj(-15)
        data = inflater.decompress(raw) + inflater.flush()
    else:
        raise ZipFormatError(f"{entry.name}: compression method {entry.method} not supported")
    if len(data) != entry.size or zlib.crc32(data) != entry.crc:
        raise ZipFormatError(f"{entry.name}: CRC or size mismatch")
    return data


def read_members(read: ReadRange, length: int, want: Callable[[str], bool],
                 gap: int = COALESCE_GAP) -> dict[str, bytes]:
    """Every member whose name `want` accepts, by name, fetching the directory and then the members' ranges."""
    entries, cd_offset = read_directory(read, length)
    offsets = sorted({e.offset for e in entries} | {cd_offset})
    ends = {a: b for a, b in zip(offsets, offsets[1:])}
    chosen = [e for e in entries if not e.name.endswith("/") and want(e.name)]
    by_offset = sorted(chosen, key=lambda e: e.offset)
    out: dict[str, bytes] = {}
    i = 0
    for start, end in spans(chosen, ends, gap):
        blob = read(start, end)
        if len(blob) != end - start:
            raise ZipFormatError(f"short read of bytes {start}-{end}")
        while i < len(by_offset) and by_offset[i].offset < end:
            entry = by_offset[i]
            out[entry.name] = member_data(entry, blob[entry.offset - start:ends[entry.offset] - start])
            i += 1
    return out
