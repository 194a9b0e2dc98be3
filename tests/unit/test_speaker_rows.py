"""Row-sparse updates of speaker tables: what fairseq's optimizers would do, row by row."""

import argparse
import copy
import io
import logging

import pytest
import torch
import torch.nn.functional as F
from fairseq import utils as fairseq_utils
from fairseq.optim.adam import Adam as FairseqAdam

from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from fairseq_speaker.optim.speaker_rows import pad_grown_optimizer_state, update_speaker_rows
from tests.helpers import TINY_STATE_SITES, build_bias, make_task

S, V = 6, 13


class Toy(torch.nn.Module):
    """A shared logit vector plus the ``full`` speaker bias: enough to give every row its own gradient. A variant
    acting on the decoder's state reaches the logits through a fixed random read-out of its state."""

    def __init__(self, sparse: bool, seed: int = 0, name: str = "full", lr_scale=None):
        super().__init__()
        torch.manual_seed(seed)
        task = make_task(num_speakers=S, num_words=V - 4 - 3)
        self.bias = build_bias(name, task, speaker_dense_updates=not sparse, speaker_lr_scale=lr_scale)
        self.shared = torch.nn.Parameter(torch.randn(len(task.target_dictionary)))
        sites = TINY_STATE_SITES
        self.register_buffer("readout", torch.randn(len(task.target_dictionary), sites.input_dim + sites.hidden_dim))

    def loss(self, speakers, targets):
        logits = self.shared + (self.bias(speakers) if self.bias.acts_on_output else 0.0)
        state = self.bias.speaker_state(speakers)
        if state is not None:
            flat = torch.cat(state.tensors(), dim=1)  # B x (what the state has of offset and scales)
            logits = logits + flat @ self.readout[:, : flat.size(1)].t()
        return F.cross_entropy(logits, targets, reduction="sum")


def batches(n, speakers_of_batch, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        speakers = torch.tensor(speakers_of_batch(i))
        out.append((speakers, torch.randint(0, V, (len(speakers),), generator=g)))
    return out


def train(model, optimizer, data, clip=0.0):
    update_speaker_rows(optimizer)  # as fairseq's optimizers do at their steps
    model.train()
    for speakers, targets in data:
        optimizer.zero_grad()
        model.loss(speakers, targets).backward()
        if clip:
            fairseq_utils.clip_grad_norm_(list(model.parameters()), clip)
        optimizer.step()


def adam(model, **kwargs):
    return FairseqAdam(model.parameters(), **{"lr": 0.1, "betas": (0.9, 0.98), "eps": 1e-8, "weight_decay": 0.0,
                                              **kwargs})


EVERYONE = lambda i: list(range(S)) + [i % S]  # noqa: E731


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_lazy_adam_is_fairseqs_adam_when_every_speaker_is_in_every_batch(weight_decay):
    sparse, dense = Toy(sparse=True), Toy(sparse=False)
    opt_sparse, opt_dense = adam(sparse, weight_decay=weight_decay), adam(dense, weight_decay=weight_decay)
    data = batches(6, EVERYONE)
    train(sparse, opt_sparse, data)
    train(dense, opt_dense, data)
    assert sparse.bias.row_sparse and not dense.bias.row_sparse
    assert torch.allclose(sparse.bias.weight, dense.bias.weight, atol=1e-6)
    assert torch.allclose(sparse.shared, dense.shared, atol=1e-6)
    state, reference = opt_sparse.state[sparse.bias.weight], opt_dense.state[dense.bias.weight]
    assert state["step"] == reference["step"] == 6 and state["row_step"].tolist() == [6] * S
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.allclose(state[key], reference[key], atol=1e-7)


ROW_SPARSE = sorted(name for name, cls in SPEAKER_BIAS_REGISTRY.items() if cls.row_sparse_parameter_names)


def test_every_variant_with_speaker_tables_of_the_paper_is_row_sparse():
    assert {"full", "fact"} <= set(ROW_SPARSE)


@pytest.mark.parametrize("name", ROW_SPARSE)
def test_every_row_sparse_variant_follows_dense_adam_on_seen_rows_and_leaves_the_others(name):
    sparse, dense = Toy(sparse=True, name=name), Toy(sparse=False, name=name)
    opts = [adam(sparse), adam(dense)]
    data = batches(3, EVERYONE)
    train(sparse, opts[0], data)
    train(dense, opts[1], data)
    assert sparse.bias.row_sparse and not dense.bias.row_sparse
    for (key, a), b in zip(sparse.named_parameters(), dense.parameters()):
        assert torch.allclose(a, b, atol=1e-5), key
    table = sparse.bias.get_parameter(type(sparse.bias).row_sparse_parameter_names[0])
    before = table.detach().clone()
    train(sparse, opts[0], batches(1, lambda i: [4], seed=2))
    assert torch.equal(table[:4], before[:4]) and not torch.equal(table[4], before[4])


def test_rows_of_absent_speakers_and_their_state_stay_as_they_were():
    model = Toy(sparse=True)
    optimizer = adam(model)
    train(model, optimizer, batches(2, EVERYONE))
    before = model.bias.weight.detach().clone()
    state = {k: v.clone() for k, v in optimizer.state[model.bias.weight].items() if torch.is_tensor(v)}
    train(model, optimizer, batches(1, lambda i: [0, 1, 1], seed=7))
    after = optimizer.state[model.bias.weight]
    assert torch.equal(model.bias.weight[2:], before[2:])  # dense Adam would move them with their momentum
    assert not torch.equal(model.bias.weight[:2], before[:2])
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(after[key][2:], state[key][2:])
    assert after["row_step"].tolist() == [3, 3, 2, 2, 2, 2]

    dense = Toy(sparse=False)
    dense_optimizer = adam(dense)
    train(dense, dense_optimizer, batches(2, EVERYONE))
    moved = dense.bias.weight.detach().clone()
    train(dense, dense_optimizer, batches(1, lambda i: [0, 1, 1], seed=7))
    assert not torch.equal(dense.bias.weight[2:], moved[2:])


@pytest.mark.parametrize("lr_scale", ["1", "auto", "2.5"])
def test_a_row_follows_adam_over_the_batches_of_its_own_speaker(lr_scale):
    """With the shared network frozen, a row's gradient depends on its own row only: lazily updated, it is
    Adam run on the batches where its speaker appears, and only those, at the learning rate times its scale:
    ``auto``, the table's updates so far over the row's own (one over the share of batches with its speaker)."""
    model = Toy(sparse=True, lr_scale=lr_scale)
    model.shared.requires_grad_(False)
    pattern = [[0, 2], [1, 3], [2, 2, 4], [0, 5], [2], [1], [4, 2]]
    data = batches(len(pattern), lambda i: pattern[i])
    train(model, adam(model), data)

    alone = Toy(sparse=False)
    alone.shared.requires_grad_(False)
    row = torch.nn.Parameter(alone.bias.weight.detach()[2].clone())
    optimizer = FairseqAdam([row], lr=0.1, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)
    seen = 0
    for update, (speakers, targets) in enumerate(data, start=1):
        if 2 in speakers.tolist():
            seen += 1
            optimizer.param_groups[0]["lr"] = 0.1 * {"1": 1.0, "2.5": 2.5, "auto": update / seen}[lr_scale]
            optimizer.zero_grad()
            mine = speakers == 2
            logits = alone.shared + row.expand(int(mine.sum()), -1)
            F.cross_entropy(logits, targets[mine], reduction="sum").backward()
            optimizer.step()
    assert torch.allclose(model.bias.weight[2], row, atol=1e-6)


def test_the_scale_reaches_only_the_speaker_rows_and_a_resumed_run_keeps_its_own():
    """The shared weights take exactly the steps of a scale of 1; a state written before the scale existed
    (0.4.0) resumes with 1, a state recording a scale keeps it, and the option given wins."""
    data = batches(4, lambda i: [[0, 1], [2], [0, 3], [5]][i])
    runs = {}
    for scale in ("1", "auto"):
        model = Toy(sparse=True, lr_scale=scale)
        optimizer = adam(model)
        train(model, optimizer, data)
        runs[scale] = (model, optimizer)
    assert not torch.allclose(runs["1"][0].bias.weight, runs["auto"][0].bias.weight)
    assert runs["auto"][1].state[runs["auto"][0].bias.weight]["lr_scale"] == 0.0  # auto

    frozen = {}
    for scale in ("1", "auto"):
        model = Toy(sparse=True, lr_scale=scale)
        model.shared.requires_grad_(False)
        optimizer = adam(model)
        train(model, optimizer, data)
        frozen[scale] = model
    for name, param in frozen["1"].named_parameters():
        if name != "bias.weight":
            assert torch.equal(param, frozen["auto"].get_parameter(name)), name

    old = Toy(sparse=True)  # no option given: a state without "lr_scale" but with steps is 0.4.0's
    optimizer = adam(old)
    train(old, optimizer, data[:2])
    del optimizer.state[old.bias.weight]["lr_scale"]
    train(old, optimizer, data[2:])
    assert optimizer.state[old.bias.weight]["lr_scale"] == 1.0
    given = Toy(sparse=True, lr_scale="3")
    given.load_state_dict(old.state_dict())
    optimizer_given = adam(given)
    optimizer_given.load_state_dict(optimizer.state_dict())
    train(given, optimizer_given, data[:1])
    assert optimizer_given.state[given.bias.weight]["lr_scale"] == 3.0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "fast", ""])
def test_a_bad_scale_is_refused_naming_the_option(value):
    with pytest.raises(UserError, match="--speaker-lr-scale"):
        Toy(sparse=True, lr_scale=value)


def test_the_gradient_norm_and_clipping_count_the_rows():
    sparse, dense = Toy(sparse=True), Toy(sparse=False)
    train(sparse, adam(sparse), batches(1, EVERYONE))  # the first step tells the variant it may go sparse
    speakers, targets = batches(1, lambda i: [1, 4, 4], seed=3)[0]
    for model in (sparse, dense):
        model.zero_grad()
        model.loss(speakers, targets).backward()
    dense.bias.weight.data.copy_(sparse.bias.weight.data)
    dense.shared.data.copy_(sparse.shared.data)
    dense.zero_grad()
    dense.loss(speakers, targets).backward()
    assert sparse.bias.weight.grad.is_sparse and not dense.bias.weight.grad.is_sparse
    norms = [fairseq_utils.clip_grad_norm_(list(m.parameters()), 0.5) for m in (sparse, dense)]
    assert float(norms[0]) == pytest.approx(float(norms[1]), rel=1e-6) and float(norms[1]) > 0.5
    assert torch.allclose(sparse.bias.weight.grad.to_dense(), dense.bias.weight.grad, atol=1e-7)
    assert torch.allclose(sparse.shared.grad, dense.shared.grad, atol=1e-7)
    total = torch.cat([dense.bias.weight.grad.flatten(), dense.shared.grad]).norm()
    assert float(total) == pytest.approx(0.5, rel=1e-4)  # clipped to the norm asked for


def test_fairseqs_multiply_grads_scales_row_sparse_gradients_as_dense_ones():
    """fairseq divides every gradient by the batch's tokens with ``multiply_grads``; its own code scales a
    detached alias of a sparse gradient, which left the rows unscaled."""
    from fairseq.optim import FairseqOptimizer

    class Wrapped(FairseqOptimizer):  # what fairseq's optimizers share: multiply_grads over their params
        def __init__(self, params):
            super().__init__(cfg=None)
            self._optimizer = torch.optim.SGD(params, lr=0.1)

    sparse, dense = Toy(sparse=True), Toy(sparse=False)
    train(sparse, adam(sparse), batches(1, EVERYONE))  # the first step tells the variant it may go sparse
    dense.load_state_dict(sparse.state_dict())
    speakers, targets = batches(1, lambda i: [1, 4, 4], seed=3)[0]
    grads = []
    for model in (sparse, dense):
        optimizer = Wrapped(list(model.parameters()))
        model.zero_grad()
        model.loss(speakers, targets).backward()
        optimizer.multiply_grads(torch.tensor(0.25))
        grads.append((model.bias.weight.grad, model.shared.grad))
    assert grads[0][0].is_sparse and not grads[1][0].is_sparse
    assert torch.allclose(grads[0][0].to_dense(), grads[1][0], atol=1e-7)
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-7)
    unscaled = torch.zeros_like(grads[1][0])
    dense.zero_grad()
    dense.loss(speakers, targets).backward()
    unscaled.copy_(dense.bias.weight.grad)
    assert torch.allclose(grads[1][0], 0.25 * unscaled, atol=1e-7) and unscaled.abs().sum() > 0


def test_clipped_training_matches_the_dense_run_when_every_speaker_is_in_every_batch():
    sparse, dense = Toy(sparse=True), Toy(sparse=False)
    data = batches(4, EVERYONE)
    train(sparse, adam(sparse), data, clip=0.1)
    train(dense, adam(dense), data, clip=0.1)
    assert torch.allclose(sparse.bias.weight, dense.bias.weight, atol=1e-6)


def test_the_rows_state_survives_a_checkpoint():
    data = batches(5, lambda i: [[0, 1], [2, 0], [5, 5], [1, 3], [0, 4]][i])
    straight = Toy(sparse=True)
    train(straight, adam(straight), data)

    first = Toy(sparse=True)
    optimizer = adam(first)
    train(first, optimizer, data[:3])
    saved_model, saved_optimizer = copy.deepcopy(first.state_dict()), copy.deepcopy(optimizer.state_dict())
    resumed = Toy(sparse=True, seed=3)
    resumed.load_state_dict(saved_model)
    resumed_optimizer = adam(resumed)
    resumed_optimizer.load_state_dict(saved_optimizer)
    train(resumed, resumed_optimizer, data[3:])
    assert torch.allclose(resumed.bias.weight, straight.bias.weight, atol=1e-7)
    assert resumed_optimizer.state[resumed.bias.weight]["row_step"].tolist() == [3, 2, 1, 1, 1, 1]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_lazy_sgd_is_torch_sgd_when_every_speaker_is_in_every_batch_and_leaves_absent_rows(momentum):
    sparse, dense = Toy(sparse=True), Toy(sparse=False)
    opts = [torch.optim.SGD(m.parameters(), lr=0.5, momentum=momentum, weight_decay=0.01) for m in (sparse, dense)]
    data = batches(3, EVERYONE)
    train(sparse, opts[0], data)
    train(dense, opts[1], data)
    assert sparse.bias.row_sparse
    assert torch.allclose(sparse.bias.weight, dense.bias.weight, atol=1e-6)
    before = sparse.bias.weight.detach().clone()
    train(sparse, opts[0], batches(1, lambda i: [3], seed=9))
    unchanged = [i for i in range(S) if i != 3]
    assert torch.equal(sparse.bias.weight[unchanged], before[unchanged])
    assert not torch.equal(sparse.bias.weight[3], before[3])


def test_another_optimizer_trains_the_table_densely_and_says_so(caplog):
    model = Toy(sparse=True)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
    with caplog.at_level(logging.INFO, logger="fairseq_speaker.optim.speaker_rows"):
        train(model, optimizer, batches(3, lambda i: [i]))
    assert not model.bias.row_sparse
    assert "dense updates (the optimizer Adagrad has no row-sparse update here)" in caplog.text
    assert model.bias.weight.grad is not None and not model.bias.weight.grad.is_sparse


def test_growing_the_table_gives_the_new_rows_a_fresh_state():
    model = Toy(sparse=True)
    optimizer = adam(model)
    train(model, optimizer, batches(2, EVERYONE))
    model.bias.grow(2, "mean")
    grown = model.bias.weight
    # as fairseq does on --restore-file: a new optimizer over the grown table, loading the saved state
    saved = optimizer.state_dict()
    optimizer = adam(model)
    optimizer.load_state_dict(saved)
    pad_grown_optimizer_state([grown])
    model.bias.num_speakers = S + 2
    train(model, optimizer, batches(1, lambda i: [S + 1, 0], seed=4))
    state = optimizer.state[grown]
    assert state["row_step"].tolist() == [3, 2, 2, 2, 2, 2, 0, 1]
    assert state["exp_avg"].shape == grown.shape and torch.count_nonzero(state["exp_avg"][S]) == 0


def test_only_optimizers_that_fairseq_steps_update_rows_and_a_plain_torch_optimizer_trains_densely():
    """The row updates are scoped: a torch optimizer that neither fairseq's trainer nor the caller hooked
    (onboarding's L-BFGS, a user's own) updates the table as a dense parameter; a fairseq optimizer's step
    hooks its own torch optimizer."""
    from fairseq.optim.sgd import SGD as FairseqSGD

    plain = Toy(sparse=True)
    optimizer = torch.optim.SGD(plain.parameters(), lr=0.5)
    plain.train()
    for speakers, targets in batches(2, lambda i: [1, 2]):
        optimizer.zero_grad()
        plain.loss(speakers, targets).backward()
        optimizer.step()
    assert not plain.bias.row_sparse and getattr(optimizer, "_speaker_rows_hook", None) is None

    hooked = Toy(sparse=True)
    cfg = type("cfg", (), {"lr": [0.5], "momentum": 0.0, "weight_decay": 0.0})()
    fairseq_optimizer = FairseqSGD(cfg, list(hooked.parameters()))
    hooked.train()
    for speakers, targets in batches(2, lambda i: [1, 2]):
        fairseq_optimizer.zero_grad()
        hooked.loss(speakers, targets).backward()
        fairseq_optimizer.step()
    assert hooked.bias.row_sparse


@pytest.mark.parametrize("optimizer_name", ["fairseq_adam", "adagrad"])
def test_dense_updates_scale_each_rows_step_as_a_learning_rate_of_their_own(optimizer_name):
    """--speaker-dense-updates (or an optimizer with no row-sparse update): a number scales the table's
    learning rate exactly (the run equals one with a param group of its own at that rate), and the shared
    weights take the steps they took before."""
    data = batches(5, lambda i: [[0, 1], [2], [0, 3], [5], [1, 2]][i])

    def build(scale):
        model = Toy(sparse=False, lr_scale=scale)
        return model

    def make(params, lr):
        if optimizer_name == "fairseq_adam":
            return FairseqAdam(params, lr=lr, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)
        return torch.optim.Adagrad(params, lr=lr)

    scaled = build("2.5")
    train(scaled, make(scaled.parameters(), 0.1), data)
    reference = build("1")
    groups = [{"params": [p for n, p in reference.named_parameters() if n != "bias.weight"], "lr": 0.1},
              {"params": [reference.bias.weight], "lr": 0.25}]
    train(reference, make(groups, 0.1), data)
    assert torch.allclose(scaled.bias.weight, reference.bias.weight, atol=1e-6)
    assert torch.allclose(scaled.shared, reference.shared, atol=1e-6)
    unscaled = build("1")
    train(unscaled, make(unscaled.parameters(), 0.1), data)
    assert not torch.allclose(unscaled.bias.weight, scaled.bias.weight)


def test_dense_adam_with_auto_gives_each_row_the_rate_of_its_share_of_updates():
    """auto on the dense path: a row's change in each update is multiplied by the table's updates over the
    row's own (counted in the optimizer state), so a row seen in every update takes the shared rate; a
    state without a scale (a 0.4.0 run) keeps 1."""
    data = batches(4, lambda i: [[0, 1], [0], [0, 2], [0]][i])
    model = Toy(sparse=False)  # auto, the default of a new run
    model.shared.requires_grad_(False)
    optimizer = adam(model)
    plain = Toy(sparse=False, lr_scale="1")
    plain.shared.requires_grad_(False)
    train(plain, adam(plain), data)
    before = model.bias.weight.detach().clone()
    train(model, optimizer, data)
    state = optimizer.state[model.bias.weight]
    assert state["table_step"] == 4 and state["row_step"].tolist() == [4, 1, 1, 0, 0, 0]
    assert torch.allclose(model.bias.weight[0], plain.bias.weight[0], atol=1e-6)  # in every update: scale 1
    assert not torch.allclose(model.bias.weight[1], plain.bias.weight[1])  # in one of four: larger steps
    moved, plain_moved = (model.bias.weight[1] - before[1]).norm(), (plain.bias.weight[1] - before[1]).norm()
    assert moved > 1.5 * plain_moved
    old = Toy(sparse=False)
    old_optimizer = adam(old)
    train(old, old_optimizer, data[:1])
    for key in ("lr_scale", "table_step", "row_step"):
        del old_optimizer.state[old.bias.weight][key]
    snapshot = old.bias.weight.detach().clone()
    reference = copy.deepcopy(old)
    reference_optimizer = adam(reference)
    reference_optimizer.load_state_dict(old_optimizer.state_dict())
    train(old, old_optimizer, data[1:])
    assert "lr_scale" not in old_optimizer.state[old.bias.weight]  # resumed with 1: nothing recorded, nothing scaled
    assert not torch.equal(old.bias.weight, snapshot)


# -- --fp16 / --bf16: the optimizer steps on fp32 copies of the parameters ------------------------------------


class WithLinear(torch.nn.Module):
    """A shared Linear layer before the ``fact`` speaker bias: the speaker table lies between shared weights
    in the parameters' order (and in fairseq's flat fp32 copy of them)."""

    def __init__(self, lr_scale=None, dense=False):
        super().__init__()
        torch.manual_seed(0)
        task = make_task(num_speakers=S, num_words=V - 4 - 3)
        self.linear = torch.nn.Linear(4, V)
        self.bias = build_bias("fact", task, speaker_dense_updates=dense, speaker_lr_scale=lr_scale)
        self.register_buffer("features", torch.randn(8, 4))

    def loss(self, speakers, targets):
        logits = self.linear(self.features[: len(speakers)].to(self.linear.weight.dtype)) + self.bias(speakers)
        return F.cross_entropy(logits.float(), targets, reduction="sum")


SOME = lambda i: [[0, 1], [2], [0, 3], [5], [1, 2], [0]][i]  # noqa: E731


def fp32_copies(params, flatten, monkeypatch):
    """fairseq's own fp32 copies of ``params`` (FP16Optimizer.build_fp32_params, as the package patches it): a
    list, or a flat copy per device, here the CPU (fairseq keys it by ``torch.cuda.current_device()`` and
    matches it with each parameter's ``device.index``, None on the CPU)."""
    from fairseq.optim.fp16_optimizer import FP16Optimizer

    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    return FP16Optimizer.build_fp32_params(argparse.Namespace(), params, flatten=flatten)


def copied_parts(copies, shapes):
    """The views of each parameter in fp32 ``copies`` (flat: back to back in the parameters' order)."""
    if isinstance(copies, list):
        return list(copies)
    (flat,) = copies.values()
    sizes = [int(torch.Size(shape).numel()) for shape in shapes]
    return [part.view(shape) for part, shape in zip(flat.detach().split(sizes), shapes)]


def copy_list(copies):
    return list(copies.values()) if isinstance(copies, dict) else list(copies)


def adam_of(params):
    return FairseqAdam(params, lr=0.1, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)


def set_copied_grads(copies, grads):
    """Give the copies ``grads`` (one per parameter), as FP16Optimizer copies the model's gradients."""
    if isinstance(copies, dict):
        (flat,) = copies.values()
        flat.grad.copy_(torch.cat([g.reshape(-1) for g in grads]))
    else:
        for copy, grad in zip(copies, grads):
            copy.grad = grad.detach().float().clone()


def dense_run(lr_scale, data):
    """The plain dense path (an fp32 model, --speaker-dense-updates): the model, its optimizer and each update's
    gradients."""
    model = WithLinear(lr_scale, dense=True)
    optimizer = adam(model)
    update_speaker_rows(optimizer)
    grads = []
    for speakers, targets in data:
        optimizer.zero_grad()
        model.loss(speakers, targets).backward()
        grads.append([p.grad.detach().clone() for p in model.parameters()])
        optimizer.step()
    return model, optimizer, grads


def step_copies(half, copies, optimizer, data, grads):
    """Updates of fp32 ``copies`` of ``half``'s parameters with ``grads``; ``half`` looks its speakers up in
    training first, as the model's forward does (a variant marks its tables there, after fairseq has built the
    copies)."""
    for (speakers, targets), update in zip(data, grads):
        half.loss(speakers, targets)
        set_copied_grads(copies, update)
        optimizer.step()


@pytest.mark.parametrize("flatten", [True, False], ids=["flat", "one_copy_per_parameter"])
@pytest.mark.parametrize("lr_scale", ["auto", "2.5"])
def test_fp16s_fp32_copies_scale_each_speaker_row_as_the_dense_path_and_leave_the_shared_weights_alone(
        flatten, lr_scale, monkeypatch):
    """--fp16/--bf16 (fairseq's FP16Optimizer): the optimizer steps on fp32 copies of the parameters, the speaker
    table a slice of one. Each speaker row changes as in the dense path of an fp32 model with the same gradients
    (its scale applied); the network's shared weights take exactly the steps they take without the scale's hook,
    and so do the variant's shared bias vectors unless the scale is ``auto`` (then they take their rows' mean
    rate, as in the dense path)."""
    data = batches(6, SOME)
    reference, reference_optimizer, grads = dense_run(lr_scale, data)
    names = [name for name, _ in reference.named_parameters()]
    shapes = [p.shape for p in reference.parameters()]
    table = names.index("bias.speaker_weights")
    assert 0 < table < len(names) - 1  # between shared weights

    # a model of its own for each run: fairseq's copy of an fp32 parameter is the parameter itself (.float())
    half, plain_half = WithLinear(lr_scale), WithLinear(lr_scale)
    hooked, plain = (fp32_copies(list(m.parameters()), flatten, monkeypatch) for m in (half, plain_half))
    hooked_optimizer, plain_optimizer = adam_of(copy_list(hooked)), adam_of(copy_list(plain))
    update_speaker_rows(hooked_optimizer)  # as fairseq's optimizers do at their steps; the plain one: no hook
    step_copies(half, hooked, hooked_optimizer, data, grads)
    step_copies(plain_half, plain, plain_optimizer, data, grads)

    scaled, unscaled = copied_parts(hooked, shapes), copied_parts(plain, shapes)
    assert torch.allclose(scaled[table], reference.bias.speaker_weights, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(scaled[table], unscaled[table], atol=1e-3)  # the scale reached the rows
    for index, name in enumerate(names):
        if index != table:
            if name == "bias.shared_biases" and lr_scale == "auto":
                assert not torch.allclose(scaled[index], unscaled[index], atol=1e-3), name
            else:
                assert torch.equal(scaled[index], unscaled[index]), name
            assert torch.allclose(scaled[index], reference.get_parameter(name), rtol=1e-6, atol=1e-7), name
    assert not half.bias.row_sparse  # the copies' gradients are dense: the lookups stay dense

    (state,) = [s for s in hooked_optimizer.state.values() if "speaker_tables" in s]
    (counters,) = state["speaker_tables"].values()
    expected = reference_optimizer.state[reference.bias.speaker_weights]
    assert counters["lr_scale"] == expected["lr_scale"] == (0.0 if lr_scale == "auto" else 2.5)
    assert counters["table_step"] == expected["table_step"] == 6
    assert counters["row_step"].tolist() == expected["row_step"].tolist() == [3, 2, 2, 1, 0, 1]


@pytest.mark.parametrize("flatten", [True, False], ids=["flat", "one_copy_per_parameter"])
def test_the_counters_of_the_tables_in_fp32_copies_survive_a_checkpoint(flatten, monkeypatch):
    """The copy's optimizer state keeps each table's scale and counters (by its offset in the copy): saved,
    loaded by torch's load_state_dict into a new optimizer over new copies, the run goes on as one that was
    never stopped."""
    data = batches(6, SOME)
    _, _, grads = dense_run("auto", data)
    shapes = [p.shape for p in WithLinear().parameters()]

    straight_half = WithLinear("auto")
    straight = fp32_copies(list(straight_half.parameters()), flatten, monkeypatch)
    straight_optimizer = update_speaker_rows(adam_of(copy_list(straight)))
    step_copies(straight_half, straight, straight_optimizer, data, grads)

    first_half = WithLinear("auto")
    first = fp32_copies(list(first_half.parameters()), flatten, monkeypatch)
    first_optimizer = update_speaker_rows(adam_of(copy_list(first)))
    step_copies(first_half, first, first_optimizer, data[:3], grads[:3])
    buffer = io.BytesIO()
    torch.save(first_optimizer.state_dict(), buffer)

    resumed_half = WithLinear("auto")  # the checkpoint's weights, new copies of them, a new optimizer
    with torch.no_grad():
        for param, saved in zip(resumed_half.parameters(), copied_parts(first, shapes)):
            param.copy_(saved)
    resumed = fp32_copies(list(resumed_half.parameters()), flatten, monkeypatch)
    resumed_optimizer = update_speaker_rows(adam_of(copy_list(resumed)))
    buffer.seek(0)
    resumed_optimizer.load_state_dict(torch.load(buffer))
    (loaded,) = [s["speaker_tables"] for s in resumed_optimizer.state.values() if "speaker_tables" in s]
    (counters,) = loaded.values()
    assert counters["lr_scale"] == 0.0 and counters["table_step"] == 3
    assert counters["row_step"].tolist() == [2, 1, 1, 1, 0, 0]
    step_copies(resumed_half, resumed, resumed_optimizer, data[3:], grads[3:])

    for got, expected in zip(copied_parts(resumed, shapes), copied_parts(straight, shapes)):
        assert torch.equal(got, expected)
    (counters,) = [s["speaker_tables"] for s in resumed_optimizer.state.values() if "speaker_tables" in s]
    (straight_counters,) = [s["speaker_tables"] for s in straight_optimizer.state.values() if "speaker_tables" in s]
    assert counters.keys() == straight_counters.keys()
    for offset in counters:
        assert counters[offset]["table_step"] == straight_counters[offset]["table_step"] == 6
        assert counters[offset]["row_step"].tolist() == straight_counters[offset]["row_step"].tolist()


@pytest.mark.parametrize("dtype, flatten", [("float16", True), ("bfloat16", False)])
def test_fairseqs_fp16_optimizer_steps_the_speaker_rows_at_their_scale_on_cpu(dtype, flatten, monkeypatch):
    """fairseq's FP16Optimizer itself, on half-precision parameters on the CPU (--fp16 with its flat copy and loss
    scaling; --bf16, one copy per parameter): at the first update, a speaker row's change in the fp32 copy is
    the scale times the change at scale 1, and the shared weights take the same step."""
    from fairseq.optim.fp16_optimizer import FP16Optimizer
    from omegaconf import OmegaConf

    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)  # the flat copy's device: the CPU's index
    bf16 = dtype == "bfloat16"
    cfg = OmegaConf.create({
        "common": {"bf16": bf16, "fp16_no_flatten_grads": not flatten, "fp16_scale_window": None,
                   "fp16_init_scale": 128, "fp16_scale_tolerance": 0.0, "threshold_loss_scale": None,
                   "min_loss_scale": 1e-4, "model_parallel_size": 1},
        "optimization": {"update_freq": [1]}, "distributed_training": {"distributed_world_size": 1},
        "optimizer": {"_name": "adam", "adam_betas": "(0.9, 0.98)", "adam_eps": 1e-8, "weight_decay": 0.0,
                      "use_old_adam": False, "fp16_adam_stats": False, "tpu": False, "lr": [0.1]}})
    speakers, targets = batches(1, lambda i: [0, 2, 2])[0]
    table = [name for name, _ in WithLinear().named_parameters()].index("bias.speaker_weights")
    moves = {}
    for scale in ("1", "2.5"):
        model = WithLinear(scale).to(getattr(torch, dtype))
        optimizer = FP16Optimizer.build_optimizer(cfg, list(model.parameters()))
        assert isinstance(optimizer.fp32_params, dict if flatten else list)
        shapes = [p.shape for p in model.parameters()]
        before = [part.clone() for part in copied_parts(optimizer.fp32_params, shapes)]
        optimizer.zero_grad()
        optimizer.backward(model.loss(speakers, targets))
        optimizer.clip_grad_norm(0.0)
        optimizer.step()
        after = copied_parts(optimizer.fp32_params, shapes)
        moves[scale] = [a - b for a, b in zip(after, before)]
        assert torch.equal(model.bias.speaker_weights, after[table].to(model.bias.speaker_weights.dtype))
    assert moves["1"][table][[0, 2]].abs().min() > 0 and torch.equal(moves["1"][table][[1, 3, 4, 5]],
                                                                       torch.zeros(4, 3))
    assert torch.allclose(moves["2.5"][table], 2.5 * moves["1"][table], rtol=1e-5, atol=1e-5)
    for index in range(len(moves["1"])):
        if index != table:
            assert torch.equal(moves["2.5"][index], moves["1"][index])
    (state,) = [s for s in optimizer.optimizer.state.values() if "speaker_tables" in s]
    assert [c["lr_scale"] for c in state["speaker_tables"].values()] == [2.5]


def test_an_fp32_copys_state_without_counters_resumes_at_the_shared_rate_unless_a_scale_is_given(monkeypatch):
    """A --fp16 run of 0.5.0, whose scale did not reach the copies, resumes with its rows at the shared rate, as
    it started (nothing recorded, nothing scaled); --speaker-lr-scale given wins."""
    data = batches(6, SOME)
    _, _, grads = dense_run("auto", data)
    plain_half = WithLinear()
    plain = fp32_copies(list(plain_half.parameters()), True, monkeypatch)
    step_copies(plain_half, plain, adam_of(copy_list(plain)), data, grads)  # never hooked
    for setting in (None, "2.5"):
        half = WithLinear(setting)
        copies = fp32_copies(list(half.parameters()), True, monkeypatch)
        optimizer = adam_of(copy_list(copies))
        step_copies(half, copies, optimizer, data[:3], grads[:3])  # no hook: the steps of 0.5.0
        update_speaker_rows(optimizer)
        step_copies(half, copies, optimizer, data[3:], grads[3:])
        (state,) = optimizer.state.values()
        (flat,), (plain_flat,) = copies.values(), plain.values()
        if setting is None:
            assert "speaker_tables" not in state and torch.equal(flat, plain_flat)
        else:
            assert [c["lr_scale"] for c in state["speaker_tables"].values()] == [2.5]
            assert not torch.equal(flat, plain_flat)


def quarter_of_the_speakers(i):
    """8 speakers, two a batch: each is in one batch of four, as a speaker of 30 sentences among 12,000 is."""
    return [(2 * i) % 8, (2 * i + 1) % 8]


def shared_vectors_moved(lr_scale, variant="fact", updates=40, state_hook=None):
    """How far the variant's shared parameters moved in ``updates`` updates (the speakers of
    :func:`quarter_of_the_speakers`), with their table's optimizer state."""
    torch.manual_seed(0)
    task = make_task(num_speakers=8, num_words=V - 4 - 3)
    bias = build_bias(variant, task, speaker_lr_scale=lr_scale)
    bias.train()
    optimizer = FairseqAdam(bias.parameters(), lr=0.01, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)
    update_speaker_rows(optimizer)
    before = {name: p.detach().clone() for name, p in bias.shared_parameters().items()}
    g = torch.Generator().manual_seed(1)
    for i in range(updates):
        if state_hook is not None and i == updates // 2:
            state_hook(optimizer, bias)
        speakers = torch.tensor(quarter_of_the_speakers(i))
        targets = torch.randint(0, len(task.target_dictionary), (2,), generator=g)
        optimizer.zero_grad()
        F.cross_entropy(bias(speakers), targets, reduction="sum").backward()
        optimizer.step()
    (table,) = bias.speaker_parameters().values()
    moved = sum(float((p.detach() - before[name]).norm()) for name, p in bias.shared_parameters().items())
    return moved, optimizer.state[table], bias


def test_the_shared_scale_is_one_over_the_speakers_mean_share_of_updates():
    """The regime of docs/speaker_learning.md: 400 speakers of 30 sentences, about 111 sentences a batch, so a
    speaker is in about one update of four: the shared vectors take four times the shared rate. Every speaker in
    every batch (the demo): 1. A number, or a state of auto written before the shared vectors followed their rows
    (0.5.0-0.8.0): 1."""
    from fairseq_speaker.optim.lr_scale import AUTO, SHARED_KEY, shared_scale

    rows = torch.full((400,), 30, dtype=torch.long)
    assert shared_scale({"lr_scale": AUTO, SHARED_KEY: 1.0, "step": 120, "row_step": rows}) == 4.0
    assert shared_scale({"lr_scale": AUTO, SHARED_KEY: 1.0, "table_step": 120, "row_step": rows}) == 4.0
    assert shared_scale({"lr_scale": AUTO, SHARED_KEY: 1.0, "step": 30, "row_step": rows}) == 1.0  # the demo
    unseen = torch.cat([rows, torch.zeros(100, dtype=torch.long)])  # speakers not seen yet do not count
    assert shared_scale({"lr_scale": AUTO, SHARED_KEY: 1.0, "step": 120, "row_step": unseen}) == 4.0
    assert shared_scale({"lr_scale": AUTO, "step": 120, "row_step": rows}) == 1.0  # a state of 0.8.0
    assert shared_scale({"lr_scale": AUTO, SHARED_KEY: 0.0, "step": 120, "row_step": rows}) == 1.0
    assert shared_scale({"lr_scale": 4.0, SHARED_KEY: 0.0, "step": 120, "row_step": rows}) == 1.0
    assert shared_scale({}) == 1.0


@pytest.mark.parametrize("variant", ["fact", "simplex", "proj"])
def test_the_shared_vectors_of_a_speaker_variant_learn_at_their_rows_rate_under_auto(variant):
    """With each speaker in one update of four, ``auto`` gives the rows four times the shared rate; the shared
    vectors they are multiplied with (``fact``'s B~, eq. 4) follow (in 0.8.0 they kept the shared rate, and
    the speakers' biases grew only as fast as they did: docs/speaker_learning.md). ``--speaker-lr-scale 1``, the
    paper's recipe, leaves them at the shared rate."""
    plain, plain_state, _ = shared_vectors_moved("1", variant)
    scaled, state, bias = shared_vectors_moved("auto", variant)
    assert plain_state["shared_lr_scale"] == 0.0 and state["shared_lr_scale"] == 1.0
    assert state["row_step"].tolist() == [10] * 8 and state["step"] == 40
    assert scaled > 2.5 * plain, (scaled, plain)  # the scale grows to 4 as the counts settle
    from fairseq_speaker.optim.table_marks import LAST_SHARED_SCALE
    assert all(getattr(p, LAST_SHARED_SCALE) == 4.0 for p in bias.own_shared_parameters())


def test_a_resumed_auto_run_of_before_keeps_its_shared_vectors_at_the_shared_rate():
    """An optimizer state of ``auto`` written by 0.5.0-0.8.0 (no ``shared_lr_scale``) resumes as it was recorded:
    rows at their scale, shared vectors at the shared rate; ``--speaker-lr-scale auto`` given again turns it on."""
    from fairseq_speaker.optim.table_marks import LAST_SHARED_SCALE

    def as_of_before(optimizer, bias):
        (table,) = bias.speaker_parameters().values()
        del optimizer.state[table]["shared_lr_scale"]

    _, state, bias = shared_vectors_moved(None, state_hook=as_of_before)
    assert state["lr_scale"] == 0.0 and state["shared_lr_scale"] == 0.0
    assert all(getattr(p, LAST_SHARED_SCALE, 1.0) == 1.0 for p in bias.own_shared_parameters())
    _, state, bias = shared_vectors_moved("auto", state_hook=as_of_before)
    assert state["shared_lr_scale"] == 1.0
    assert all(getattr(p, LAST_SHARED_SCALE) == 4.0 for p in bias.own_shared_parameters())
