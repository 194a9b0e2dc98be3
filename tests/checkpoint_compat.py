"""Decoding a frozen checkpoint the same way at every release, to prove old checkpoints keep working.

``tests/fixtures/checkpoints/<release>/`` holds tiny checkpoints trained by that
release (one per preset), the dictionaries and test sentences they need, and
``expected.json``: what that release's code produced with them. The unit test
``tests/unit/test_backwards_compatibility.py`` decodes them with today's code and
compares. ``scripts/make_fixtures.py`` writes a new release's folder.
"""

import json
import os
from typing import Dict, List

import torch
from fairseq import checkpoint_utils, utils
from fairseq.data.data_utils import collate_tokens

from fairseq_speaker import USER_DIR

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "checkpoints")


def read(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def decode(checkpoint: str, data: str) -> Dict[str, List]:
    """Beam-5 translations of ``data/test.en`` as the speakers of ``data/test.spk``, and the
    log-probability the model gives each reference ``data/test.fr`` (teacher forcing)."""
    utils.import_user_module(type("Args", (), {"user_dir": USER_DIR})())
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": data, "source_lang": "en", "target_lang": "fr"})
    model = models[0].eval()
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    sources, references, labels = (read(os.path.join(data, f"test.{ext}")) for ext in ("en", "fr", "spk"))
    speakers = task.speaker_dictionary.encode(labels, "mean", source="test.spk")
    src = [src_dict.encode_line(line, add_if_not_exist=False).long() for line in sources]
    sample = {
        "id": torch.arange(len(src)),
        "net_input": {
            "src_tokens": collate_tokens(src, src_dict.pad(), left_pad=True),
            "src_lengths": torch.tensor([len(s) for s in src]),
            "speakers": speakers,
        },
    }
    generator = task.build_generator([model], type("Gen", (), {"beam": 5, "max_len_b": 20})())
    with torch.no_grad():
        hypos = task.inference_step(generator, [model], sample)
    translations = [tgt_dict.string(h[0]["tokens"]) for h in hypos]
    scores = [round(float(h[0]["score"]), 5) for h in hypos]

    # teacher forcing: the summed log-probability of each reference (with its speaker token, if any)
    tgt = [tgt_dict.encode_line(line, add_if_not_exist=False).long() for line in references]
    if getattr(task, "uses_speaker_token", False):
        tokens = task.speaker_token_ids()
        tgt = [torch.cat([tokens[s : s + 1], t]) for s, t in zip(speakers.tolist(), tgt)]
    target = collate_tokens(tgt, tgt_dict.pad(), left_pad=False)
    prev = collate_tokens(tgt, tgt_dict.pad(), left_pad=False, move_eos_to_beginning=True)
    with torch.no_grad():
        net_output = model(**sample["net_input"], prev_output_tokens=prev)
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
    picked = lprobs.gather(2, target.unsqueeze(2)).squeeze(2).masked_fill(target.eq(tgt_dict.pad()), 0.0)
    return {
        "translations": translations,
        "scores": scores,
        "reference_logprobs": [round(float(v), 5) for v in picked.sum(1)],
    }


def load_expected(release: str) -> Dict[str, Dict]:
    with open(os.path.join(FIXTURES, release, "expected.json"), encoding="utf-8") as f:
        return json.load(f)
