"""What an audio file is, read from its header (dialects/audio_files.py), and one metadata value of a GGUF
file read without the gguf package (gguf_header.py): pure functions over bytes."""

from __future__ import annotations

import struct

import pytest

from api_like_oai.dialects.audio_files import AudioFile, inspect
from api_like_oai.errors import InvalidRequest
from api_like_oai.gguf_header import POOLING_RANK, pooling_type

from ..faults.test_transcription import flac_of, mp3_of, wav_of

MP3_FRAME_SECONDS = 1152 / 44100


def xing_mp3(frames: int) -> bytes:
    """A variable-rate mp3's first frame: a Xing header (after 32 bytes of stereo side info) with its frame count."""
    first = b"\xff\xfb\x90\x64" + bytes(32) + b"Xing" + struct.pack(">II", 1, frames)
    return first + bytes(417 - len(first)) + mp3_of(3)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (wav_of(2.0), AudioFile("wav", 2.0)),
        (wav_of(1.5, rate=8000), AudioFile("wav", 1.5)),
        (flac_of(12.0), AudioFile("flac", 12.0)),
        (flac_of(0), AudioFile("flac", None)),
        (mp3_of(100), AudioFile("mp3", 100 * 417 * 8 / 128000)),
        (b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10) + mp3_of(10), AudioFile("mp3", 10 * 417 * 8 / 128000)),
    ],
)
def test_format_and_length(data, expected):
    assert inspect(data) == expected


def test_a_wavs_length_is_its_frames_over_its_sample_rate_whatever_its_byte_rate_says():
    """issue 48: a 10 s clip whose header claimed a byte rate of 4 GB/s counted 0.000075 s of the key's quota."""
    honest = wav_of(10.0)
    lying = honest[:28] + struct.pack("<I", 0xFFFFFFFF) + honest[32:]  # the fmt chunk's byte_rate
    assert inspect(lying) == inspect(honest) == AudioFile("wav", 10.0)


def test_a_variable_rate_mp3_is_measured_by_its_frame_count():
    assert inspect(xing_mp3(1000)).seconds == pytest.approx(1000 * MP3_FRAME_SECONDS)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"OggS" + bytes(40), "audio format ogg is not accepted: send wav, mp3 or flac"),
        (bytes(4) + b"ftypM4A " + bytes(40), "audio format mp4/m4a is not accepted: send wav, mp3 or flac"),
        (b"\x1aE\xdf\xa3" + bytes(40), "audio format webm is not accepted: send wav, mp3 or flac"),
        (b"hello", "the file is not audio this server reads: send wav, mp3 or flac"),
        (b"RIFF\x04\x00\x00\x00WAVE", "the wav file is corrupt: it has no format or data chunk"),
        (wav_of(1.0)[:44], "the wav file is corrupt: it holds no samples"),
        (b"fLaC\x81" + bytes(60), "the flac file is corrupt: it does not begin with a STREAMINFO block"),
        (
            b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(30),
            "the mp3 file is corrupt: no MPEG audio frame where its first one should be",
        ),
    ],
)
def test_what_is_refused_and_why(data, message):
    with pytest.raises(InvalidRequest) as refused:
        inspect(data)
    assert (refused.value.message, refused.value.param) == (message, "file")


def test_a_ggufs_pooling_type_is_read_from_its_header(tmp_path):
    import gguf

    path = tmp_path / "ranker.gguf"
    writer = gguf.GGUFWriter(str(path), "bert")
    writer.add_token_list(["[PAD]", "hello", "world"])  # an array of strings before the value, skipped
    writer.add_context_length(512)
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_tensor("dummy", __import__("numpy").zeros(4, dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert pooling_type(str(path)) == POOLING_RANK
    assert pooling_type(str(tmp_path / "missing.gguf")) is None
