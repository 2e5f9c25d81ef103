"""Evaluate the demo models on the held-out split and write their model cards.

    python -m training.evaluate --target runs/carbon-demo/model \
        --draft runs/carbon-demo-draft/model [--previous assets/models/carbon-demo] [--install assets/models]

Measured in one run, on the held-out data of `training.data`:

- sequence recovery as in the Carbon evaluations: 594 bases of context, the
  next 30 bases generated greedily at base level (bp mode), per-base accuracy;
  against a uniform guess and the best k-th order Markov model fitted on the
  same training windows (k chosen by recovery on the validation windows);
- whether a species tag helps its own group (recovery and log-likelihood of the
  30 bases, with minus without the tag);
- variant effects in held-out genes (`variant_sets.py`), scored as the app
  scores them: AUROC of -delta for stop-gain vs synonymous and splice-site vs
  deep-intronic substitutions, and the share of random substitutions with a
  negative delta, beside the Markov baseline and the model being replaced;
- draft-vs-target agreement: how often the draft's greedy 6-mer equals the
  target's along the target's own greedy continuation (the acceptance rate of
  greedy speculative decoding).

With --install the two model directories are copied into `assets/models/`
with their cards, paired as target and draft.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from carbon_app.core.tokens import dna_prompt
from carbon_app.inference.generate import generate
from carbon_app.inference.score import Variant, score_sequence, variant_passes
from carbon_app.inference.spec import METHODS, resolve_spec
from carbon_app.model.bundle import load_bundle
from carbon_app.model.card import SCORING_FILE
from carbon_app.model.hub import ROLE_FILE, model_role

from .data import EVAL_CONTEXT, EVAL_TARGET, GROUPS, WINDOW_TOKENS
from .merge import merge_command
from .train import kept_near_start, model_folder, not_a_model, run_preset, shares_text, train_command, training_lineage
from .variant_sets import splice_dinucleotide_change

MAX_MARKOV_ORDER = 10
METHOD_NAMES = {"marginal": "reference FNS marginals (the product of six per-base distributions)",
                "chain": "exact chain rule (each 6-mer's own probability, split over its bases)"}
VARIANT_WINDOW = 1200
# The demo models' variant scores are read with the exact chain rule, not the reference FNS marginals: their
# reading-frame and in-frame stop training shapes the joint of a 6-mer's bases (a stop codon is unlikely as a
# whole), and a product of six per-base marginals averages that joint away. The other method is measured too,
# and the card and the page say which method each figure is for.
VARIANT_METHOD = "chain"
OTHER_METHODS = [method for method in METHODS if method != VARIANT_METHOD]
WHOLE_WINDOW_KEY = "target_variants_whole_window"  # the target's own method over the whole window, beside a radius
_DIGIT = {b: i for i, b in enumerate("ATCG")}


# -- Markov baseline --------------------------------------------------------------------------


def training_bases(data: Path) -> np.ndarray:
    """The training windows as base digits [N, L] (A=0 T=1 C=2 G=3, -1 where a window is shorter or
    holds an `<oov>` 6-mer), decoded from their token rows."""
    rows = np.load(data / "train_rows.npy").astype(np.int64)
    dna_at = np.load(data / "train_dna_at.npy").astype(np.int64)
    config = json.loads((data / "tokenizer" / "dna_config.json").read_text())
    kmer_start, k = config["dna_start_id"] + len(config["dna_special_tokens"]), config["k"]
    columns = np.minimum(dna_at[:, None] + 1 + np.arange(WINDOW_TOKENS), rows.shape[1] - 1)
    kmers = np.take_along_axis(rows, columns, axis=1) - kmer_start
    valid = (kmers >= 0) & (kmers < 4**k) & (dna_at[:, None] + 1 + np.arange(WINDOW_TOKENS) < rows.shape[1])
    digits = (np.where(valid, kmers, 0)[..., None] // 4 ** np.arange(k - 1, -1, -1)) % 4
    digits[~valid] = -1
    return digits.reshape(len(kmers), -1)


class MarkovModel:
    """k-th order Markov model of the training windows: greedy recovery and per-base log-likelihoods,
    both backing off to shorter contexts where a context was (almost) never seen."""

    def __init__(self, windows: np.ndarray, max_order: int = MAX_MARKOV_ORDER):
        self.counts = []
        length = windows.shape[1]
        for order in range(max_order + 1):
            index = np.zeros((windows.shape[0], length - order), dtype=np.int64)
            valid = np.ones(index.shape, dtype=bool)
            for j in range(order + 1):  # (k+1)-mer codes built a base at a time, to keep memory flat
                column = windows[:, j : length - order + j]
                index = index * 4 + np.maximum(column, 0)
                valid &= column >= 0
            self.counts.append(np.bincount(index[valid], minlength=4 ** (order + 1)).reshape(-1, 4))
        self.seen = [counts.sum(axis=1) for counts in self.counts]  # how often each context was seen, by order

    def _row(self, history: list[int], order: int, min_count: int = 1) -> np.ndarray:
        for k in range(order, -1, -1):
            index = sum(d * 4 ** (k - 1 - i) for i, d in enumerate(history[len(history) - k :])) if k else 0
            if self.seen[k][index] >= min_count:
                return self.counts[k][index]
        return self.counts[0][0]

    def recover(self, context: str, n: int, order: int) -> str:
        history = [_DIGIT[b] for b in context]
        out = []
        for _ in range(n):
            base = int(self._row(history, order).argmax())
            out.append(base)
            history.append(base)
        return "".join("ATCG"[d] for d in out)

    def loglik(self, seq: str, order: int, min_count: int = 10) -> float:
        """Log-likelihood of `seq` (contexts seen fewer than `min_count` times back off; +0.5 smoothing); a
        base other than A/C/G/T (an N) scores nothing and starts the context afresh. Every base at once: the
        context each base has at each order, then the longest of them seen often enough."""
        digits = np.array([_DIGIT.get(base, -1) for base in seq], dtype=np.int64)
        at = np.arange(len(digits))
        # the bases of history each base has: those since the sequence's start or its last N
        breaks = np.maximum.accumulate(np.where(digits < 0, at, -1))
        history = at - np.concatenate(([-1], breaks[:-1])) - 1
        known = np.maximum(digits, 0)
        contexts = [np.zeros(len(digits), dtype=np.int64)]  # each base's context of k bases (`_row`'s index)
        chosen = np.zeros(len(digits), dtype=np.int64)  # order 0 where nothing longer was seen often enough
        for k in range(1, order + 1):
            before = np.concatenate((np.zeros(min(k, len(digits)), dtype=np.int64), known[: max(len(digits) - k, 0)]))
            contexts.append(contexts[-1] + before * 4 ** (k - 1))
            chosen[(history >= k) & (self.seen[k][contexts[k]] >= min_count)] = k
        scored = digits >= 0
        rows = np.zeros((len(digits), 4), dtype=np.float64)
        for k in range(order + 1):
            here = scored & (chosen == k)
            rows[here] = self.counts[k][contexts[k][here]]
        rows = rows[scored] + 0.5
        return float(np.log(rows[np.arange(len(rows)), digits[scored]] / rows.sum(axis=1)).sum())


def accuracy(predicted: str, truth: str) -> float:
    return sum(a == b for a, b in zip(predicted, truth, strict=True)) / len(truth)


# -- measurements --------------------------------------------------------------------------


def recovery(windows: list[dict], predict) -> dict[str, float]:
    """Mean per-base accuracy per group (and overall) of `predict(window) -> 30 bases`."""
    by_group: dict[str, list[float]] = {}
    for window in windows:
        truth = window["seq"][EVAL_CONTEXT : EVAL_CONTEXT + EVAL_TARGET]
        by_group.setdefault(window["group"], []).append(accuracy(predict(window), truth))
    result = {group: float(np.mean(values)) for group, values in by_group.items()}
    result["all"] = float(np.mean([v for values in by_group.values() for v in values]))
    return result


def markov_predictor(markov: MarkovModel, order: int):
    """`predict(window)` for `recovery`: the order-`order` Markov model's greedy 30 bases after the context."""
    return lambda window: markov.recover(window["seq"][:EVAL_CONTEXT], EVAL_TARGET, order)


def markov_recovery_by_order(markov: MarkovModel, windows: list[dict]) -> dict[int, float]:
    """Overall recovery of each order on `windows`: on the validation windows, what chooses the baseline's order."""
    return {k: recovery(windows, markov_predictor(markov, k))["all"] for k in range(1, MAX_MARKOV_ORDER + 1)}


def own_species_tag(bundle, group: str) -> str | None:
    """The group's species tag where the model was trained with one (never for prokaryotes, which
    Carbon leaves untagged), else None."""
    return group if group in bundle.tags.species else None


def model_recovery(bundle, windows: list[dict], with_species: bool) -> dict[str, float]:
    def predict(window):
        species = own_species_tag(bundle, window["group"]) if with_species else None
        return generate(bundle, window["seq"][:EVAL_CONTEXT], EVAL_TARGET, temperature=0, mode="bp",
                        species=species).sequences[0]

    return recovery(windows, predict)


def tag_loglikelihood_delta(bundle, windows: list[dict]) -> dict[str, float]:
    """Mean log-likelihood per base of the 30 target bases, own species tag minus none."""
    deltas: dict[str, list[float]] = {}
    for window in windows:
        species = own_species_tag(bundle, window["group"])
        if species is None:
            continue
        seq = window["seq"][: EVAL_CONTEXT + EVAL_TARGET]
        tagged = score_sequence(bundle, seq, species=species).logprobs[EVAL_CONTEXT:]
        plain = score_sequence(bundle, seq).logprobs[EVAL_CONTEXT:]
        deltas.setdefault(window["group"], []).append(float(tagged.mean() - plain.mean()))
    return {group: float(np.mean(values)) for group, values in deltas.items()}


def auroc(positives: list[float], negatives: list[float]) -> float:
    """Probability that a positive scores above a negative (ties count half): the area under the ROC."""
    pos, neg = np.asarray(positives)[:, None], np.asarray(negatives)[None, :]
    return float((pos > neg).mean() + 0.5 * (pos == neg).mean())


def variant_deltas(delta_of, variants: list[dict]) -> list[float]:
    """`delta_of(context, variant_text)` for each held-out variant."""
    return [delta_of(v["context"], f"{v['context_pos']}:{v['ref']}>{v['alt']}") for v in variants]


Reading = tuple[str, int | None]  # how a delta is read: (method, radius in bases; None: the whole window)


def model_delta(bundle, method: str = VARIANT_METHOD, delta_radius: int | None = None):
    """The app's score: frame-averaged, strand-averaged, a 1,200-base window, no tags, read with `method`
    and summed within `delta_radius` bases of the variant (None: over the whole window)."""
    return model_deltas(bundle, ((method, delta_radius),))[method, delta_radius]


def model_deltas(bundle, readings: tuple[Reading, ...]) -> dict:
    """`model_delta` for each of `readings`, all read from one set of forward passes: a variant scored for
    the first is looked up, not scored again, for the others (the forward passes are most of the time)."""
    (method, delta_radius), *_ = readings
    spec = resolve_spec(bundle, window=VARIANT_WINDOW, strand_average=True, method=method, delta_radius=delta_radius)
    methods = tuple(dict.fromkeys(m for m, _ in readings))
    read: dict[tuple[str, str], dict[Reading, float]] = {}

    def delta_read(reading: Reading):
        def delta(context: str, variant: str) -> float:
            if (context, variant) not in read:
                passes = variant_passes(bundle, context, variant, spec, methods)
                read[context, variant] = {(m, r): passes.delta(m, r) for m, r in readings}
            return read[context, variant][reading]
        return delta

    return {reading: delta_read(reading) for reading in readings}


def markov_delta(markov: MarkovModel, order: int):
    """The same delta under the Markov baseline: the centred window, strand-averaged."""
    from carbon_app.core.dna import reverse_complement
    from carbon_app.inference.score import Variant, variant_window

    def delta(context: str, text: str) -> float:
        variant = Variant.parse(text)
        start, end = variant_window(len(context), variant.pos - 1, len(variant.ref), VARIANT_WINDOW)
        ref = context[start:end]
        at = variant.pos - 1 - start
        alt = ref[:at] + variant.alt + ref[at + len(variant.ref) :]
        both = [markov.loglik(s, order) + markov.loglik(reverse_complement(s), order) for s in (ref, alt)]
        return (both[1] - both[0]) / 2

    return delta


def dinucleotide_delta(context: str, text: str) -> float:
    """A baseline that knows only "GT and AG are good": the splice dinucleotides (either strand) an SNV
    makes, less those it breaks. What a model that favours them everywhere drifts towards."""
    variant = Variant.parse(text)
    return float(splice_dinucleotide_change({"context": context, "context_pos": variant.pos, "alt": variant.alt}))


def variant_signal(delta_of, variant_sets: dict[str, list[dict]], seed: int = 0, with_random: bool = True) -> dict:
    """(a) AUROC of -delta, stop-gain vs synonymous; (b) splice-site vs deep-intronic; where the sets hold
    them, (b) again against deep-intronic SNVs that break the same splice dinucleotide the same way
    ("splice_matched": knowing the site, not liking GT and AG, is what scores there); per group and
    pooled; (c) the share of random SNVs (a random base within 100 of every third held-out site) with
    delta < 0 (left out when not `with_random`)."""
    out: dict = {}
    # a reading: its name, then the set and kind of its positives and of its negatives
    readings = [("coding", "coding", "stop_gain", "coding", "synonymous"),
                ("splice", "splice", "splice_site", "splice", "deep_intronic")]
    if variant_sets.get("splice_matched"):
        readings.append(("splice_matched", "splice", "splice_site", "splice_matched", "deep_same_dinucleotide"))
    scored: dict[str, list[tuple[dict, float]]] = {}  # each set scored once, whichever readings use it
    for reading, positive_task, positive, negative_task, negative in readings:
        for task in {positive_task, negative_task} - set(scored):
            scored[task] = list(zip(variant_sets[task], variant_deltas(delta_of, variant_sets[task]), strict=True))
        pairs = [(v, d) for v, d in scored[positive_task] if v["kind"] == positive]
        pairs += [(v, d) for v, d in scored[negative_task] if v["kind"] == negative]
        scores = {g: {positive: [], negative: []} for g in sorted({v["group"] for v, _ in pairs})}
        for v, d in pairs:
            scores[v["group"]][v["kind"]].append(-d)
        table = {g: auroc(s[positive], s[negative]) for g, s in scores.items()}
        table["all"] = auroc([-d for v, d in pairs if v["kind"] == positive],
                             [-d for v, d in pairs if v["kind"] == negative])
        out[reading] = {"auroc": table, "variants": {g: len(s[positive]) + len(s[negative]) for g, s in scores.items()},
                        "mean_delta": {kind: float(np.mean([d for v, d in pairs if v["kind"] == kind]))
                                       for kind in (positive, negative)}}
    if not with_random:
        return out
    rng = random.Random(seed)
    randoms = []
    for v in (variant_sets["coding"] + variant_sets["splice"])[::3]:
        at = min(max(v["context_pos"] - 1 + rng.randint(-100, 100), 0), len(v["context"]) - 1)
        if v["context"][at] in "ACGT":
            alt = rng.choice([b for b in "ACGT" if b != v["context"][at]])
            randoms.append({**v, "context_pos": at + 1, "ref": v["context"][at], "alt": alt})
    random_deltas = variant_deltas(delta_of, randoms)
    out["random"] = {"variants": len(random_deltas), "fraction_negative": float(np.mean(np.array(random_deltas) < 0)),
                     "mean_delta": float(np.mean(random_deltas))}
    return out


@torch.inference_mode()
def greedy_agreement(target, draft, windows: list[dict], tokens: int = 30) -> dict[str, float]:
    """Fraction of steps where the draft's greedy 6-mer equals the target's (token and bp mode)."""
    from carbon_app.inference.marginals import factorised_logprobs, log_marginals

    agree = {"token": [], "bp": []}
    for window in windows:
        context = window["seq"][:EVAL_CONTEXT]
        for mode in ("token", "bp"):
            continuation = generate(target, context, tokens * 6, temperature=0, mode=mode).sequences[0]
            ids = torch.tensor([target.tokenizer.encode(dna_prompt("", context + continuation))])
            picks = []
            for bundle in (target, draft):
                hidden = bundle.hidden_states(ids[:, :-1])[0, -tokens:]
                logprobs = torch.log_softmax(bundle.kmer_logits(hidden), -1)
                if mode == "bp":
                    logprobs = factorised_logprobs(log_marginals(logprobs))
                picks.append(logprobs.argmax(-1))
            agree[mode].append(float((picks[0] == picks[1]).float().mean()))
    return {mode: float(np.mean(values)) for mode, values in agree.items()}


def held_out_fingerprint(data: Path, without: frozenset[str] = frozenset()) -> str:
    """sha256 of the held-out files the figures are measured on: the test windows and the variant sets. With
    `without`, of the variant file as it stood before those sets were added to it: the data command writes
    it as `json.dumps` of its sets in order, so the same dump less those sets gives the earlier file's bytes."""
    digest = hashlib.sha256()
    digest.update((data / "test.json").read_bytes())
    variants = (data / "test_variants.json").read_bytes()
    if without:
        variants = json.dumps({task: sets for task, sets in json.loads(variants).items()
                               if task not in without}).encode()
    digest.update(variants)
    return digest.hexdigest()


def own_saved_figures(model_dir: Path, data: Path, delta_radius: int | None = None) -> tuple[dict, dict] | None:
    """An installed target's own recovery and variant figures from its eval.json, where this evaluation would
    measure the same again: the same held-out files (by fingerprint), the same window, method and radius.
    Figures saved before a variant set was added to the files still stand for the sets they read: the file
    less the new sets must be the one they were measured on, byte for byte; the readings of the new sets are
    then missing (the cards show "-"). Else None, and the model is measured afresh. Spares a replaced model's
    hour of scoring."""
    try:
        saved = json.loads((model_dir / "eval.json").read_text())
        role = model_role(model_dir)["role"]
        variant_sets = json.loads((data / "test_variants.json").read_text())
        unread = frozenset(variant_sets) - frozenset(saved["target_variants"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # an installed draft's eval.json holds its target's figures: only a target's are its own
    same = (role == "target" and saved.get("held_out_sha256") == held_out_fingerprint(data, unread)
            and saved.get("variant_window") == VARIANT_WINDOW and own_method(saved) == VARIANT_METHOD
            and own_delta_radius(saved) == delta_radius and "target" in saved)
    return (saved["target"], saved["target_variants"]) if same else None


def load_float32(model_dir: Path, device: str):
    """A model as the evaluation runs it: float32 on `device`."""
    return load_bundle(str(model_dir), device=torch.device(device), dtype=torch.float32)


@torch.inference_mode()
def evaluate(target_dir: Path, draft_dir: Path | None, data: Path, previous_dir: Path | None = None,
             device: str = "cpu", delta_radius: int | None = None) -> dict:
    """Every figure of the cards, the variant deltas summed within `delta_radius` bases of each variant (None:
    the whole window; the target is read over the whole window too). The models run in float32 on
    `device`, so a GPU gives the CPU's figures (up to the order of float sums) in a fraction of the time."""

    validation = json.loads((data / "validation.json").read_text())
    test = json.loads((data / "test.json").read_text())
    variant_sets = json.loads((data / "test_variants.json").read_text())
    print(f"fitting Markov models (orders 0-{MAX_MARKOV_ORDER}) on the training windows", flush=True)
    markov = MarkovModel(training_bases(data))
    val_by_order = markov_recovery_by_order(markov, validation)
    best_order = max(val_by_order, key=val_by_order.get)
    print(f"Markov validation recovery by order: {json.dumps({k: round(v, 4) for k, v in val_by_order.items()})}; "
          f"best k = {best_order}", flush=True)
    rng = random.Random(0)
    results = {
        "held_out_sha256": held_out_fingerprint(data),
        "test_windows": len(test),
        "uniform": recovery(test, lambda w: "".join(rng.choice("ACGT") for _ in range(EVAL_TARGET))),
        "markov_order": best_order,
        "markov_validation_by_order": val_by_order,
        "markov": recovery(test, markov_predictor(markov, best_order)),
        "variant_window": VARIANT_WINDOW,
        "variant_method": VARIANT_METHOD,
        "variant_delta_radius": delta_radius,
    }
    # for scoring, the order that predicts held-out bases best (recovery's greedy choice favours low orders)
    val_loglik = {k: float(np.mean([markov.loglik(w["seq"], k) / len(w["seq"]) for w in validation]))
                  for k in range(1, MAX_MARKOV_ORDER + 1)}
    scoring_order = max(val_loglik, key=val_loglik.get)
    results["markov_scoring_order"] = scoring_order
    print(f"Markov validation log-likelihood per base by order: "
          f"{json.dumps({k: round(v, 4) for k, v in val_loglik.items()})}; scoring with k = {scoring_order}",
          flush=True)
    print("variant effects under the Markov baseline", flush=True)
    results["markov_variants"] = variant_signal(markov_delta(markov, scoring_order), variant_sets)
    results["dinucleotide_variants"] = variant_signal(dinucleotide_delta, variant_sets)
    target = load_float32(target_dir, device)
    print("target recovery, no tag / own species tag", flush=True)
    results["target"] = model_recovery(target, test, with_species=False)
    results["target_species_tag"] = model_recovery(target, test, with_species=True)
    results["species_tag_recovery_delta"] = {g: results["target_species_tag"][g] - results["target"][g]
                                             for g in results["target"] if own_species_tag(target, g)}
    results["species_tag_loglik_delta_per_base"] = tag_loglikelihood_delta(target, test)
    print("target variant effects", flush=True)
    whole = ((VARIANT_METHOD, None),) if delta_radius is not None else ()
    deltas = model_deltas(target, ((VARIANT_METHOD, delta_radius), *((m, delta_radius) for m in OTHER_METHODS), *whole))
    results["target_variants"] = variant_signal(deltas[VARIANT_METHOD, delta_radius], variant_sets)
    for method in OTHER_METHODS:
        print(f"target variant effects read with the {method} method (the same forward passes)", flush=True)
        results[f"target_variants_{method}"] = variant_signal(deltas[method, delta_radius], variant_sets)
    if whole:
        print("target variant effects summed over the whole window (the same forward passes)", flush=True)
        results[WHOLE_WINDOW_KEY] = variant_signal(deltas[whole[0]], variant_sets)
    if previous_dir is not None and (saved := own_saved_figures(previous_dir, data, delta_radius)) is not None:
        print("previous model: its own saved figures (same held-out files, window, method and radius)", flush=True)
        results["previous"], results["previous_variants"] = saved
        results["previous_figures"] = "saved"
    elif previous_dir is not None:
        print("previous model: recovery and variant effects", flush=True)
        previous = load_float32(previous_dir, device)
        results["previous"] = model_recovery(previous, test, with_species=False)
        results["previous_variants"] = variant_signal(model_delta(previous, delta_radius=delta_radius), variant_sets)
        results["previous_figures"] = "measured"
    if draft_dir is not None:
        results.update(draft_figures(target, load_float32(draft_dir, device), test))
    return results


def draft_figures(target, draft, test: list[dict]) -> dict:
    """The draft's own figures: its recovery, and how often its greedy 6-mer equals the target's."""
    print("draft recovery and greedy agreement with the target", flush=True)
    return {"draft": model_recovery(draft, test, with_species=False),
            "draft_greedy_agreement": greedy_agreement(target, draft, test[::6])}


@torch.inference_mode()
def measure_draft(target_dir: Path, draft_dir: Path, data: Path, device: str = "cpu") -> dict:
    """`draft_figures` alone, for a draft distilled again for a target already measured."""
    target, draft = (load_float32(d, device) for d in (target_dir, draft_dir))
    return draft_figures(target, draft, json.loads((data / "test.json").read_text()))


def own_method(results: dict) -> str:
    """The method the target's own variant figures were read with (results of older versions: the marginals)."""
    return results.get("variant_method", "marginal")


def own_delta_radius(results: dict) -> int | None:
    """The radius the target's own variant figures were summed within (None: the whole window, as before)."""
    return results.get("variant_delta_radius")


def other_readings(results: dict) -> dict[str, dict]:
    """The target's variant figures read with each other method measured, by method."""
    return {m: results[f"target_variants_{m}"] for m in METHODS if f"target_variants_{m}" in results}


def quality_summary(results: dict) -> dict:
    """The few numbers the app shows beside a score: how far this model's variant scores can be trusted."""
    def figures(variants: dict) -> dict:
        return {"stop_gain_vs_synonymous_auroc": variants["coding"]["auroc"]["all"],
                "splice_site_vs_deep_intronic_auroc": variants["splice"]["auroc"]["all"],
                "random_snv_fraction_negative": variants["random"]["fraction_negative"]}

    quality = {"demo": True, **figures(results["target_variants"]), "method": own_method(results),
               "other_methods": {m: figures(variants) for m, variants in other_readings(results).items()},
               "window": results["variant_window"]}
    if own_delta_radius(results) is not None:
        quality["delta_radius"] = own_delta_radius(results)
        quality["whole_window"] = figures(results[WHOLE_WINDOW_KEY])
    return quality


# -- reporting -----------------------------------------------------------------------------


def recovery_table(results: dict) -> str:
    rows = [("uniform guess", results["uniform"]), (f"Markov, order {results['markov_order']}", results["markov"])]
    if "previous" in results:
        rows.append(("previous carbon-demo, no tag", results["previous"]))
    rows += [("carbon-demo, no tag", results["target"]), ("carbon-demo, species tag", results["target_species_tag"])]
    if "draft" in results:
        rows.append(("carbon-demo-draft, no tag", results["draft"]))
    groups = [g for g in (*GROUPS, "all") if g in results["target"]]
    lines = ["| predictor | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
    for name, values in rows:
        lines.append(f"| {name} | " + " | ".join(f"{100 * values.get(g, float('nan')):.1f}" for g in groups) + " |")
    return "\n".join(lines)


def variant_table(results: dict) -> str:
    """AUROC per task and group, and the random-SNV share, one row each, a column per predictor measured
    (tasks down the side: a card stays readable however many groups there are)."""
    predictors = [(f"Markov, order {results['markov_scoring_order']}", results["markov_variants"])]
    if "dinucleotide_variants" in results:
        predictors.append(("GT and AG only", results["dinucleotide_variants"]))
    if "previous_variants" in results:
        predictors.append(("previous carbon-demo", results["previous_variants"]))
    predictors.append(("carbon-demo", results["target_variants"]))
    predictors += [(f"carbon-demo, {m}", variants) for m, variants in other_readings(results).items()]
    if WHOLE_WINDOW_KEY in results:
        predictors.append(("carbon-demo, whole window", results[WHOLE_WINDOW_KEY]))
    names = {"coding": "stop-gain vs synonymous", "splice": "splice site vs matched deep intronic",
             "splice_matched": "splice site vs deep intronic, same dinucleotide broken"}
    counts = results["target_variants"]
    lines = ["| task | group | " + " | ".join(name for name, _ in predictors) + " | variants |",
             "|---|---|" + "---|" * (len(predictors) + 1)]

    def cell(values: dict, task: str, group: str) -> str:  # a reading measured before the task existed: "-"
        return f"{values[task]['auroc'][group]:.3f}" if task in values else "-"

    for task in (task for task in names if task in counts):
        for g in counts[task]["auroc"]:
            n = counts[task]["variants"].get(g, sum(counts[task]["variants"].values()))
            lines.append(f"| {names[task]} | {g} | "
                         + " | ".join(cell(values, task, g) for _, values in predictors) + f" | {n} |")
    lines.append("| random SNVs with delta < 0 | all | "
                 + " | ".join(f"{100 * values['random']['fraction_negative']:.1f}%" for _, values in predictors)
                 + f" | {counts['random']['variants']} |")
    return "\n".join(lines)


def model_card(model_dir: Path, role: str, results: dict, commands: list[str]) -> str:
    training = json.loads((model_dir / "training.json").read_text())
    cfg, log, data_card = training["config"], training["log"], training["data_card"]
    config = json.loads((model_dir / "config.json").read_text())
    groups = "\n".join(
        f"| {g} | {', '.join(info['species'][:4])}{' ...' if len(info['species']) > 4 else ''} | "
        f"{info['bases_available']:,} | {info['train_bases']:,} | {info['test_windows']} |"
        for g, info in data_card["groups"].items())
    losses = "\n".join(f"| {e['step']} | {e['train_loss']:.4f} | {e['val_ce']:.4f} | {e['val_bits_per_base']:.3f} | "
                       f"{e['val_fns_per_base']:.4f} |" for e in log)
    sources = ", ".join(f"{s['package']} {s['version']} ({s['client']})" for s in data_card["sources"])
    tag = results["species_tag_recovery_delta"]
    loglik = results["species_tag_loglik_delta_per_base"]
    agreement = results.get("draft_greedy_agreement")
    this = {"config": cfg, "final": log[-1] if log else None}
    if "parents" in training:  # the model is a merge (merge.py)
        this["parents"] = training["parents"]
    runs = runs_in_order([*training.get("lineage", []), this])
    teachers = run_teachers(runs)
    runs_table = "\n".join(run_row(run, teacher) for (run, _), teacher in zip(runs, teachers, strict=True))
    merges = [run for run, _ in runs if run.get("parents")]
    how = (f"Trained in {len(runs)} runs, each continuing from the weights of the one before (`--init`)"
           if not merges else
           f"Made in {len(runs) - len(merges)} runs and {len(merges)} merge{'s' * (len(merges) > 1)}, each run "
           "continuing from the weights of the run it names (`--init`: the one before it here, unless it starts a "
           "line of its own), and " + "; ".join(merge_text(run) for run in merges))
    continued = "" if len(runs) == 1 else f"""
{how}; the last is described above. Frame weight: the share of the loss given to a reading-frame probe; stop weight: the
in-frame stop unlikelihood term (and, "among SNVs", each coding 6-mer's cross-entropy against its stop-making
SNVs); splice weight: each splice 6-mer's cross-entropy among its rivals, the 6-mers that differ from it at its
splice dinucleotide's bases only; group
weights: how many times as often a group's windows were drawn (`train --help`).

| run | steps | peak lr | FNS from | frame weight | stop weight | splice weight | group weights | teacher | minutes \
| val. bits/base |
|---|---|---|---|---|---|---|---|---|---|---|
{runs_table}
"""
    regenerate = "\n".join(f"    {command}" for command in commands)
    reading = "\n".join([f"{METHOD_NAMES[own_method(results)]}, carbon-demo's default in the app (the previous "
                         "model's column too).",
                         *(f'The column "carbon-demo, {m}" reads the same model with the {METHOD_NAMES[m]}.'
                           for m in other_readings(results))])
    delta_radius = own_delta_radius(results)
    summed = ("summed over the whole window" if delta_radius is None else
              f"summed over the {delta_radius} bases either side of the variant, the window still its context (the "
              "far bases' terms move at random in a model this small; the column \"carbon-demo, whole window\" "
              "sums them all)")
    return f"""---
license: apache-2.0
tags: [dna, carbon, demo]
---

# {model_dir.name if role == 'target' else cfg['name']} ({role})

A small demonstration model in the format of the Carbon DNA language models
(Llama decoder, non-overlapping 6-mer tokens, FNS), trained by Carbon Studio
on real genomes from public packages so that the app works offline.
**Demo only: not for biological conclusions.** It is far smaller and has seen
far less DNA than Carbon-500M/3B/8B.

## Architecture

LlamaForCausalLM, {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, FFN
{config['intermediate_size']}, {config['num_attention_heads']} heads / {config['num_key_value_heads']} KV
heads, tied embeddings, {training['parameters']:,} parameters, context {config['max_position_embeddings']}
tokens ({config['max_position_embeddings'] * 6:,} bases), vocabulary {config['vocab_size']:,} ids: the tag
strings of the pipeline scheme as single text ids, then `<dna>` `</dna>` `<oov>`, the 4,096 6-mers in
A, T, C, G order and 8 unused ids (`dna_config.json`). Weights stored in float16.

## Data

Sources (pinned): {sources}. {data_card['split']}. Windows of {data_card['window_bases']:,} bases; prompt
template mix in training: {json.dumps(data_card['template_mix'])}; gene windows by region:
{json.dumps(data_card['train_regions'])}.

| group | species | bases available | training bases | test windows |
|---|---|---|---|---|
{groups}

## Training

{f"No training of its own: {merge_text(this)}." if "parents" in this else training_text(cfg, teachers[-1], losses)}
{continued}
## Evaluation (held-out test split, {results['test_windows']} windows)

Sequence recovery, % of the next {EVAL_TARGET} bases recovered greedily (bp mode) after {EVAL_CONTEXT} bases:

{recovery_table(results)}

Species tag on its own group, tagged minus untagged: recovery
{json.dumps({g: round(100 * v, 2) for g, v in tag.items()})} (percentage points); mean log-likelihood per base
{json.dumps({g: round(v, 4) for g, v in loglik.items()})}.

### Variant effects in held-out genes

Single-base substitutions in annotated genes never trained on (held out whole, by locus; human genes
from the held-out GenBank entries and the augustus-doc locus), each scored as the app scores a variant:
delta = LL(alt) - LL(ref) in a {results['variant_window']:,}-base window centred on it, {summed}, averaged over
the six 6-mer frames and both strands, no tags, each base's log-probability read with the
{reading} AUROC of -delta (1.0: every damaging variant scores
below every neutral one; 0.5: no signal). (a) stop-gain versus synonymous substitutions inside the CDS
(the same number of each from every gene); (b) substitutions of the canonical GT/AG splice dinucleotides
versus deep-intronic ones (at least 100 bases into the same introns), each control making the same
base change (REF and ALT) as a splice-site substitution of its intron, so the two sets differ in place only;
last row: the share of random substitutions (a random base within 100 bases of every third site)
that make the sequence less likely. An AUROC below 0.5 means the scores point the wrong way on that task.
{'The previous carbon-demo figures are its own, read from its saved eval.json (an evaluation on the same '
 'held-out files, with the same window, method and radius).' if results.get('previous_figures') == 'saved' else ''}

{variant_table(results)}
{'' if agreement is None else f'''
Draft-vs-target greedy agreement (the acceptance rate of greedy speculative decoding): token mode
{100 * agreement['token']:.1f}%, bp mode {100 * agreement['bp']:.1f}%.
'''}
## Regenerate

The data command draws today's mix (its card is in `training.json`); a run before the last may have
been trained on an earlier build, so these commands give a model of the same recipe, not the same
weights.

    python -m training.data --out data/demo
{regenerate}
"""


def training_text(cfg: dict, teacher: str | None, losses: str) -> str:
    """The card's account of a run: its schedule, loss and (`losses`) log."""
    return f"""{cfg['steps']} steps of {cfg['batch']} windows, AdamW (lr {cfg['lr']} cosine to {cfg['min_lr']}, warm-up
{cfg['warmup']}, weight decay {cfg['weight_decay']}), seed {cfg['seed']}. Cross-entropy over the 6-mers, then
from step {int(cfg['fns_from'] * cfg['steps'])} the mean of cross-entropy and the FNS per-base loss.
{kl_text({**cfg, 'teacher': teacher})}

| step | train loss | validation CE / token | bits / base | FNS loss / base |
|---|---|---|---|---|
{losses}"""


def run_row(run: dict, teacher: str | None) -> str:
    """A run's row of the card's runs table (a merge's: its name, "merge" and dashes)."""
    c = run["config"]
    if run.get("parents"):
        return f"| {c['name']} | merge | - | - | - | - | - | - | - | - | - |"
    return (f"| {c['name']} | {c['steps']} | {c['lr']:g} | {int(c['fns_from'] * c['steps'])} | "
            f"{c.get('frame_weight') or 0:g} | {stop_weights(c)} | {splice_weights(c)} | "
            f"{shares_text(c.get('group_weights') or {}) or '-'} | {teacher or '-'} | "
            f"{run['final']['minutes']:.0f} | {run['final']['val_bits_per_base']:.3f} |")


def merge_text(run: dict) -> str:
    """What a merge averaged, by its parents' run names."""
    c = run["config"]
    base, other = (lineage[-1]["config"]["name"] if (lineage := run["parents"][role]) else c[role]
                   for role in ("base", "other"))
    return (f"{c['name']} averages the weights of two: (1 - {c['weight']:g}) x {base} + {c['weight']:g} x {other} "
            "(`merge.py`)")


def scoring_setup(results: dict) -> dict:
    """A measured target's own scoring setup (its `scoring.json`): the one its variant figures were read with,
    every frame and both strands at VARIANT_WINDOW bases (`variant_scores`)."""
    return {"window": results.get("variant_window", VARIANT_WINDOW), "frames": None, "strand_average": True,
            "method": results.get("variant_method", VARIANT_METHOD), "delta_radius": own_delta_radius(results),
            "measured": True}


def install(target_dir: Path, draft_dir: Path | None, results: dict, assets: Path) -> None:
    pairs = [(target_dir, "carbon-demo", {"role": "target", "draft": "carbon-demo-draft" if draft_dir else None})]
    if draft_dir:
        pairs.append((draft_dir, "carbon-demo-draft", {"role": "draft", "target": "carbon-demo"}))
    # read before anything is copied: a run continued from the installed model names it as its start
    lineages = {name: training_lineage(source) for source, name, _ in pairs}
    name_installed_teachers_by_their_runs(lineages.values(), assets / "carbon-demo")
    # a draft begun from its target (`--init-layers`) came through the target's runs too: each once
    commands = list(dict.fromkeys(command for name in lineages for command in lineage_commands(lineages[name])))
    outputs = {name: output_of(lineage[-1]) for name, lineage in lineages.items()}
    commands.append(f"python -m training.evaluate --target {outputs['carbon-demo']} "
                    + (f"--draft {outputs['carbon-demo-draft']} " if draft_dir else "")
                    + ("" if own_delta_radius(results) is None else f"--delta-radius {own_delta_radius(results)} ")
                    + "--previous assets/models/carbon-demo --install assets/models")
    for source, name, role in pairs:
        dest = assets / name
        if dest.resolve() != source.resolve():
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(source, dest)
        training = json.loads((dest / "training.json").read_text())
        training["config"], training["lineage"] = lineages[name][-1]["config"], lineages[name][:-1]
        (dest / "training.json").write_text(json.dumps(training, indent=1) + "\n")
        (dest / ROLE_FILE).write_text(json.dumps(role) + "\n")
        # "quality" is the target's own variant-effect measurement: the draft's scores were not measured, and
        # the page must not show the target's figures beside them
        measured = results if role["role"] == "target" else {k: v for k, v in results.items() if k != "quality"}
        (dest / "eval.json").write_text(json.dumps(measured, indent=1) + "\n")
        if role["role"] == "target":  # the setup its quality was measured with: how every surface scores it
            (dest / SCORING_FILE).write_text(json.dumps(scoring_setup(results), indent=1) + "\n")
        (dest / "README.md").write_text(model_card(dest, role["role"], results, commands))
        print(f"installed {dest}")


def name_installed_teachers_by_their_runs(lineages, installed: Path) -> None:
    """A run kept near the installed target (`--teacher assets/models/carbon-demo`) that did not start from it
    names a folder the install is about to fill with another model: name, in place, the folder the installed
    model's own last run wrote instead, which its lineage makes before this run."""
    try:
        made_by = output_of(json.loads((installed / "training.json").read_text()))
    except (OSError, ValueError, KeyError):
        return  # nothing installed yet, or a model without a training record: no name to give
    for lineage in lineages:
        for run in lineage:
            teacher = run["config"].get("teacher")
            if teacher and not kept_near_start(run["config"]) and Path(teacher).resolve() == installed.resolve():
                run["config"] = {**run["config"], "teacher": made_by}


def stop_weights(config: dict) -> str:
    """A run's stop terms as its card's runs table gives them: the unlikelihood weight, then any among-SNVs one."""
    among = config.get("stop_contrast_weight") or 0
    return f"{config.get('stop_weight') or 0:g}" + (f" + {among:g} among SNVs" if among else "")


def splice_weights(config: dict) -> str:
    """A run's splice term as its card's runs table gives it: the weight of the contrast among rivals."""
    among = config.get("splice_contrast_weight") or 0
    return f"{among:g} among rivals" if among else "0"


def run_teachers(runs: list[tuple[dict, str | None]]) -> list[str | None]:
    """Each run's teacher as its Regenerate command names it (`runs_in_order`'s pairs): for a target kept
    near the model it continued, that model's folder as the commands make it (the folder the run recorded
    may since hold the run's own result, installed)."""
    return [previous if kept_near_start(run["config"]) else run["config"].get("teacher") for run, previous in runs]


def kl_text(cfg: dict) -> str:
    """What a run's KL term was: a draft's distillation, or what kept a target near another model."""
    if not cfg.get("teacher"):
        return ""
    if run_preset(cfg) == "draft":
        return f"Distilled from carbon-demo (KL weight {cfg['distill_weight']})."
    again = [f"at every token again (weight {cfg['anchor_weight']})" if cfg.get("anchor_weight") else "",
             f"at its coding tokens again (weight {cfg['coding_distill_weight']})"
             if cfg.get("coding_distill_weight") else ""]
    return (f"Kept near {cfg['teacher']} by the KL divergence from it (weight {cfg['distill_weight']})"
            + "".join(f", and {text}" for text in again if text) + ".")


def runs_in_order(lineage: list[dict]) -> list[tuple[dict, str | None]]:
    """Each run of a lineage, oldest first, with the folder it continued from as the commands make it (None
    for a run from scratch or a merge); a merge comes after both its parents' runs, those they share once."""
    ordered: list[tuple[dict, str | None]] = []
    previous = None
    for run in lineage:
        if parents := run.get("parents"):
            for parent in parents.values():
                ordered += [item for item in runs_in_order(parent)
                            if all(item[0]["config"] != seen["config"] for seen, _ in ordered)]
            ordered.append((run, None))
        else:
            ordered.append((run, previous))
        previous = output_of(run)
    return ordered


def lineage_commands(lineage: list[dict]) -> list[str]:
    """The commands that made a model, in order: each run's from the output of the one it continued, each
    merge's from its two parents' outputs."""
    commands = []
    for run, previous in runs_in_order(lineage):
        for card, out in (("target_rows", "data"), ("mix_rows", "mix_data")):  # data a target wrote (draft_data)
            command = draft_data_command(rows, run["config"][out]) if (rows := run.get(card)) else None
            if command and command not in commands:  # a folder that several runs read is written once
                commands.append(command)
        if run.get("parents"):
            commands.append(merge_command(run["config"], parent_folder(run, "base"), parent_folder(run, "other")))
        else:
            commands.append(train_command(run["config"], previous))
    return commands


def draft_data_command(rows: dict, out: str) -> str:
    """The command that wrote the rows a data card's `target_rows` describes into `out`."""
    greedy_only = rows["temperatures"] == [0.0]  # the greedy half of `drawn` windows (older cards: all)
    return (f"python -m training.draft_data --teacher {rows['teacher']} --data {rows['source']} "
            f"--out {out} " + (f"--rows {rows['drawn']} --greedy-only" if greedy_only else f"--rows {rows['rows']}"))


def output_of(run: dict) -> str:
    """The folder a run (or merge) of a lineage saved its model to."""
    return str(model_folder(run["config"]["out_root"], run["config"]["name"]))


def parent_folder(merge: dict, role: str) -> str:
    """A merge's "base" or "other" as the commands make it: its last run's output (the folder it named when
    that model has no training record)."""
    lineage = merge["parents"][role]
    return output_of(lineage[-1]) if lineage else merge["config"][role]


def saved_results(path: Path, parser: argparse.ArgumentParser) -> dict:
    """An earlier run's figures, or a usage error that says why they cannot be used."""
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        parser.error(f"--results {path}: cannot read saved results ({error})")
    needed = ("target", "markov", "target_variants", "markov_variants")
    missing = [key for key in needed if key not in results] if isinstance(results, dict) else list(needed)
    if missing:
        parser.error(f"--results {path}: not the results of an evaluation (no {', '.join(missing)})")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path)
    parser.add_argument("--data", type=Path, default=Path("data/demo"))
    parser.add_argument("--previous", type=Path, help="the model being replaced, measured beside the new one")
    parser.add_argument("--install", type=Path, help="copy the models with their cards into this folder")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the models run, in float32 (default: cuda when available)")
    parser.add_argument("--results", type=Path,
                        help="take the figures from these saved results (an earlier --json) instead of measuring "
                             "again: writes the cards and installs only")
    parser.add_argument("--delta-radius", type=int, default=None,
                        help="sum each variant's delta within this many bases of it, as the app will read the model "
                             "(its card says so); the whole window is read too. Default: the whole window")
    parser.add_argument("--measure-draft", action="store_true",
                        help="with --results and --draft: measure the draft's figures again (a draft distilled "
                             "again for the same target) and keep the saved target's")
    args = parser.parse_args(argv)
    for flag, folder in (("--target", args.target), ("--draft", args.draft), ("--previous", args.previous)):
        if problem := not_a_model(flag, folder):
            parser.error(problem)
    if args.delta_radius is not None and (args.delta_radius < 0 or args.results):
        parser.error("--delta-radius takes a whole number of bases, 0 or more, and is read when measuring, not with "
                     "--results (the saved figures name their own)")
    if args.measure_draft and not (args.results and args.draft):
        parser.error("--measure-draft needs --results (the target's saved figures) and --draft (the draft to measure)")
    if args.results:
        results = saved_results(args.results, parser)
        if args.measure_draft:
            results.update(measure_draft(args.target, args.draft, args.data, device=args.device))
    else:
        results = evaluate(args.target, args.draft, args.data, args.previous, device=args.device,
                           delta_radius=args.delta_radius)
    results["quality"] = quality_summary(results)
    print(recovery_table(results))
    print(f"species tag, recovery delta (points): "
          f"{json.dumps({g: round(100 * v, 2) for g, v in results['species_tag_recovery_delta'].items()})}")
    print(f"species tag, log-likelihood delta per base: "
          f"{json.dumps({g: round(v, 4) for g, v in results['species_tag_loglik_delta_per_base'].items()})}")
    print(variant_table(results))
    if "draft_greedy_agreement" in results:
        print(f"draft greedy agreement: {json.dumps(results['draft_greedy_agreement'])}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.install:
        install(args.target, args.draft, results, args.install)


if __name__ == "__main__":
    main()
