import hashlib


def dictionary_hash(dictionary) -> str:
    """A fingerprint of a fairseq dictionary: the SHA-1 of its symbols in index order.

    Two dictionaries with the same hash map every id to the same word, so parameters
    indexed by one (a topic model over source words, a speaker's bias over target words)
    can be used with the other.
    """
    digest = hashlib.sha1()
    for symbol in dictionary.symbols:
        digest.update(symbol.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
