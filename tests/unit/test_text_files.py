"""fairseq_speaker/data/text_files.py: the text files a command reads (adaptation sentences, references, systems'
outputs), read as the speaker files are."""

from fairseq_speaker.data import read_lines
from fairseq_speaker.data.text_files import utf8_lines


def test_a_byte_order_mark_is_no_part_of_the_first_word(tmp_path):
    """A Windows editor's BOM became part of the first word: read as unknown (adapt), a word that matches no
    reference's (report)."""
    path = tmp_path / "refs.fr"
    path.write_bytes(b"\xef\xbb\xbfje suis fatigu\xc3\xa9e .\r\n\xef\xbb\xbftu es libre .\n")
    assert read_lines(str(path)) == ["je suis fatiguée .", "\ufefftu es libre ."]  # a BOM starts a file, not a line
    assert [n for n, _ in utf8_lines(str(path))] == [1, 2]
