"""The bodies of the service's requests and answers (pydantic models: validated on the way in, described at /docs).

Requests refuse fields they do not define, so that a misspelt field (``speakrs``) is an error, not ignored, and
take every field in its own JSON type (``strict``): ``"beam": true`` is not a beam of 1, ``"replace": "yes"`` or
``1`` is not ``true``, ``"beam": 5.0`` is not an integer.
"""

from typing import Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(_Request):
    model: Optional[str] = Field(None, description="the model to translate with, by its id (GET /models lists them; "
                                 "default: the service's default model)")
    sentences: List[str] = Field(description="the sentences to translate, as the model reads them (raw text when "
                                 "the checkpoint keeps its preprocessing or the service was started with "
                                 "--tokenizer/--bpe)")
    speakers: Optional[List[str]] = Field(None, description="one speaker per sentence")
    speaker: Optional[str] = Field(None, description="one speaker for every sentence (instead of speakers)")
    beam: Optional[int] = Field(None, ge=1, description="the beam size (default: the service's --beam; at most its "
                                "--max-beam)")
    nbest: int = Field(1, ge=1, description="how many translations of each sentence, best first (at most the beam); "
                       "above 1 each translation lists them in 'hypotheses'")

    @model_validator(mode="after")
    def _one_way_of_naming_speakers(self):
        if (self.speakers is None) == (self.speaker is None):
            raise ValueError("give either 'speakers' (one per sentence) or 'speaker' (for every sentence)")
        if self.speakers is not None and len(self.speakers) != len(self.sentences):
            raise ValueError(f"{len(self.speakers)} speakers for {len(self.sentences)} sentences: give one speaker "
                             f"per sentence, or 'speaker' for all")
        return self

    def labels(self) -> List[str]:
        """One speaker per sentence."""
        return list(self.speakers) if self.speakers is not None else [self.speaker] * len(self.sentences)


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="fairseq's score: the mean log-probability of its tokens")


class Translation(BaseModel):
    text: str = Field(description="the translation (detokenized when the checkpoint keeps its preprocessing or the "
                      "service was started with --tokenizer/--bpe)")
    speaker: str = Field(description="the speaker it was translated as, as given")
    unknown_speaker_policy_applied: bool = Field(
        description="true if the model does not know the speaker, so that the unknown-speaker policy was applied "
        "(the mean speaker, or none: see unknown_speaker_policy)")
    unknown_words: int = Field(
        0, description="how many of the sentence's words (tokens, as the model reads them) are not in the model's "
        "source dictionary: a sentence mostly of unknown words (text not in the form of the training data: not "
        "tokenized or BPE-encoded, full-width forms, NFD accents; another language) is translated into one that has "
        "little to do with it")
    hypotheses: Optional[List[Hypothesis]] = Field(
        None, description="with nbest above 1: the nbest best translations, best first (the first is 'text')")


class TranslateResponse(BaseModel):
    translations: List[Translation] = Field(description="one per sentence, in the order of the request")
    unknown_speaker_policy: str = Field(description="what a speaker the model does not know gets: 'mean' (the mean "
                                        "of the trained speakers), 'none' (no speaker), 'fail' (refused)")
    model: str = Field(description="the id of the model that translated")


class SentencePairs(_Request):
    sources: List[str] = Field(description="source sentences, raw as for /translate")
    targets: List[str] = Field(description="their translations as this speaker would have them, one per source")

    @model_validator(mode="after")
    def _aligned(self):
        if len(self.sources) != len(self.targets):
            raise ValueError(f"{len(self.sources)} sources but {len(self.targets)} targets: give one target per source")
        if not self.sources:
            raise ValueError("no sentence pairs: give at least one source and its target")
        return self


class OnboardRequest(SentencePairs):
    replace: bool = Field(False, description="fit an onboarded speaker again, from these sentences alone")


class Trait(BaseModel):
    trait: int = Field(description="the trait, numbered as fairseq-speaker-words lists the model's (1, 2, ...)")
    kind: int = Field(description="the speaker's likeliest kind of speaker for this trait (1 .. kinds)")
    kinds: int = Field(description="how many kinds of speaker the trait has")
    probability: float = Field(description="the posterior probability of that kind, given the speaker's words")
    evidence: int = Field(description="how many of the trait's alternatives the speaker said")
    words: List[str] = Field(description="the words that tell that kind from the others (where the others choose "
                             "otherwise), most telling first")


class Speaker(BaseModel):
    name: str
    kind: Literal["trained", "onboarded"] = Field(description="trained with the model, or onboarded by the service")
    sentences: int = Field(description="the sentences the speaker was trained or fitted on")
    created: Optional[str] = Field(None, description="when it was onboarded (ISO 8601, UTC); null for a trained one")
    updated: Optional[str] = Field(None, description="when its rows last changed (ISO 8601, UTC)")
    traits: Optional[List[Trait]] = Field(
        None, description="what the speaker's words suggest of them, one entry a trait of which they said a word: "
        "where the model remembers its speakers' words with kinds of speaker (fairseq-speaker-words); null otherwise")


class Fit(BaseModel):
    tokens: int = Field(description="target tokens fitted on")
    loss_before: float = Field(description="per-token loss of the speaker's sentences with the mean speaker")
    loss_after: float = Field(description="per-token loss after the fit")
    iterations: int
    seconds: float


class OnboardResponse(BaseModel):
    speaker: Speaker
    fit: Fit


class SpeakerList(BaseModel):
    speakers: List[Speaker] = Field(description="trained speakers (in the model's order), then onboarded ones "
                                    "(oldest first)")


class Deleted(BaseModel):
    deleted: str


class ServiceLimits(BaseModel):
    max_sentences: int = Field(description="sentences in one /translate request (--max-sentences)")
    max_chars: int = Field(description="characters in one sentence, to translate or of a pair (--max-chars)")
    max_pairs: int = Field(description="sentence pairs in one onboarding or update request (--max-pairs)")
    max_speaker_pairs: int = Field(description="sentence pairs one speaker is fitted on in all (--max-speaker-pairs)")
    max_beam: int = Field(description="the largest beam a request may ask for (--max-beam)")
    beam: int = Field(description="the beam of a request that does not say (--beam)")
    max_body_bytes: int = Field(description="the largest request body, in bytes (derived from the limits above)")


class Health(BaseModel):
    status: Literal["ok"]
    speakers: Dict[str, int] = Field(description="trained and onboarded speakers of the default model")
    model: Dict[str, object] = Field(description="the default model's checkpoint and what ties speaker rows to it")
    models: List[str] = Field(description="the ids of the models served, the default first (GET /models describes "
                              "them)")
    writes: bool = Field(description="whether the write endpoints are enabled (a token is configured)")


class ModelInfo(BaseModel):
    id: str = Field(description="the model's id: 'model' of POST /translate, '?model=' of the speaker endpoints")
    default: bool = Field(description="whether a request that names no model goes to this one")
    checkpoint: str = Field(description="the checkpoint file, as it was given")
    data: str = Field(description="the data directory of its dictionaries")
    checkpoint_sha256: str = Field(description="the SHA-256 of the checkpoint file as it was loaded")
    checkpoint_bytes: int = Field(description="the size of the checkpoint file")
    checkpoint_modified: str = Field(description="when the checkpoint file was last changed (ISO 8601, UTC)")
    loaded_at: str = Field(description="when the service loaded it (ISO 8601, UTC)")
    load_seconds: float = Field(description="how long loading it took, its stored speakers included")
    speakers: Dict[str, int] = Field(description="trained and onboarded speakers")
    variant: Optional[str] = Field(None, description="the speaker variant (null: a model without speaker rows)")
    unknown_speaker_policy: str = Field(description="what a speaker the model does not know gets")
    refitted: Optional[int] = Field(None, description="in the answer to a load: the stored speakers refitted on this "
                                    "checkpoint from their sentences (it has other shared parameters than the one "
                                    "they were fitted on), or 0")


class ModelList(BaseModel):
    models: List[ModelInfo] = Field(description="the models served, the default first, then in the order they were "
                                    "loaded")


class ModelLoad(_Request):
    checkpoint: Optional[str] = Field(None, min_length=1, description="the checkpoint to load, a path on the "
                                      "service's machine (default: the model's own, read again)")
    data: Optional[str] = Field(None, min_length=1, description="its data directory (default: the model's)")


class ModelAdd(_Request):
    id: str = Field(description="the new model's id: letters, digits, '.', '_' and '-', at most 64, beginning with a "
                    "letter or digit")
    checkpoint: str = Field(min_length=1, description="the checkpoint to load, a path on the service's machine")
    data: Optional[str] = Field(None, min_length=1, description="its data directory (default: the default model's)")


class ModelRemoved(BaseModel):
    removed: str = Field(description="the id of the model no longer served (its stored speakers are kept)")


class ErrorBody(BaseModel):
    code: str = Field(description="a stable word for the kind of error (unauthorized, speaker_exists, ...)")
    message: str = Field(description="what went wrong and what to do, for a person")


class Error(BaseModel):
    error: ErrorBody
