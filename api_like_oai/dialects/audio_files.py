"""What an audio file is, read from its bytes before anything is sent upstream (pure): its format (wav,
mp3 or flac: what llama.cpp's multimodal library decodes, through miniaudio) and its length in seconds,
from its header (wav: the data chunk and byte rate; flac: STREAMINFO; mp3: the Xing/Info frame count,
else the first frame's bit rate). Anything else is an InvalidRequest naming what it is."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import InvalidRequest

ACCEPTED = ("wav", "mp3", "flac")
# Other containers a client may send, named in the refusal: (magic, offset, name).
_OTHERS = ((b"OggS", 0, "ogg"), (b"ftyp", 4, "mp4/m4a"), (b"\x1aE\xdf\xa3", 0, "webm"), (b"#!AMR", 0, "amr"))
# MPEG audio layer III: bit rates (kbit/s) by index, for MPEG-1 and MPEG-2/2.5; sample rates by version.
_MP3_RATES = {
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_SAMPLE_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


@dataclass(frozen=True)
class AudioFile:
    format: str
    seconds: float | None  # None: the header does not say (a FLAC stream of unknown length)


def inspect(data: bytes, param: str = "file") -> AudioFile:
    """The file's format and length; InvalidRequest if it is none of ACCEPTED or its header is broken."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return AudioFile("wav", _wav_seconds(data, param))
    if data[:4] == b"fLaC":
        return AudioFile("flac", _flac_seconds(data, param))
    if data[:3] == b"ID3" or _mp3_frame_at(data, 0) is not None:
        return AudioFile("mp3", _mp3_seconds(data, param))
    other = next((name for magic, offset, name in _OTHERS if data[offset : offset + len(magic)] == magic), None)
    if other is not None:
        raise InvalidRequest(
            f"audio format {other} is not accepted: send wav, mp3 or flac", param=param, code="unsupported_format"
        )
    raise InvalidRequest("the file is not audio this server reads: send wav, mp3 or flac", param=param, code="unsupported_format")


def _broken(kind: str, param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"the {kind} file is corrupt: {why}", param=param, code="invalid_audio")


def _wav_seconds(data: bytes, param: str) -> float:
    """The data chunk's frames (its length over channels × bits per sample) over the sample rate, the
    chunks walked as RIFF lays them out. Not the header's byte_rate: a caller writes that field, and a
    10 s clip with a huge one once counted 0.000075 s against the key's audio quota."""
    byte_rate, position = None, 12
    while position + 8 <= len(data):
        chunk, size = data[position : position + 4], struct.unpack_from("<I", data, position + 4)[0]
        if chunk == b"fmt " and size >= 16:
            _format, channels, rate, _byte_rate, block, bits = struct.unpack_from("<HHIIHH", data, position + 8)
            if not (channels and rate and block and 0 < bits <= 64):
                raise _broken("wav", param, "its format chunk has zero channels, rate or block size, or odd bits per sample")
            byte_rate = channels * bits / 8 * rate  # what the samples take a second, read from what decodes them
        elif chunk == b"data":
            if byte_rate is None:
                raise _broken("wav", param, "its data comes before its format chunk")
            present = min(size, len(data) - position - 8)
            if present <= 0:
                raise _broken("wav", param, "it holds no samples")
            return present / byte_rate
        position += 8 + size + (size & 1)
    raise _broken("wav", param, "it has no format or data chunk")


def _flac_seconds(data: bytes, param: str) -> float | None:
    """STREAMINFO (the first metadata block, 34 bytes): 20 bits of sample rate, 36 of total samples."""
    if len(data) < 42 or data[4] & 0x7F != 0:
        raise _broken("flac", param, "it does not begin with a STREAMINFO block")
    packed = int.from_bytes(data[18:26], "big")
    rate, total = packed >> 44, packed & ((1 << 36) - 1)
    if rate == 0:
        raise _broken("flac", param, "its sample rate is zero")
    return total / rate if total else None


def _mp3_seconds(data: bytes, param: str) -> float:
    start = _after_id3(data)
    frame = _mp3_frame_at(data, start)
    if frame is None:
        raise _broken("mp3", param, "no MPEG audio frame where its first one should be")
    version, bitrate, sample_rate, mono = frame
    samples_per_frame = 1152 if version == 3 else 576
    side_info = (17 if mono else 32) if version == 3 else (9 if mono else 17)
    tag = data[start + 4 + side_info : start + 8 + side_info]
    if tag in (b"Xing", b"Info") and struct.unpack_from(">I", data, start + 8 + side_info)[0] & 1:
        frames = struct.unpack_from(">I", data, start + 12 + side_info)[0]
        return frames * samples_per_frame / sample_rate
    return (len(data) - start) * 8 / (bitrate * 1000)  # constant bit rate: its size says its length


def _after_id3(data: bytes) -> int:
    """Where the audio begins: after an ID3v2 tag (its size is four 7-bit bytes)."""
    if data[:3] != b"ID3" or len(data) < 10:
        return 0
    size = 0
    for byte in data[6:10]:
        size = (size << 7) | (byte & 0x7F)
    return 10 + size + (10 if data[5] & 0x10 else 0)


def _mp3_frame_at(data: bytes, position: int) -> tuple[int, int, int, bool] | None:
    """(version bits, bit rate in kbit/s, sample rate, mono) of a layer III frame header at `position`."""
    if len(data) < position + 4 or data[position] != 0xFF or data[position + 1] & 0xE0 != 0xE0:
        return None
    version, layer = (data[position + 1] >> 3) & 3, (data[position + 1] >> 1) & 3
    rate_index, sample_index = data[position + 2] >> 4, (data[position + 2] >> 2) & 3
    if version == 1 or layer != 1 or rate_index in (0, 15) or sample_index == 3:
        return None
    bitrate = _MP3_RATES[1 if version == 3 else 2][rate_index]
    return version, bitrate, _MP3_SAMPLE_RATES[version][sample_index], data[position + 3] >> 6 == 3
