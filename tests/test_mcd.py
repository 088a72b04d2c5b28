"""The MCD procedure on hand-made count matrices, tiny corpora, the CLI, and (when present) real captions."""

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import ROOT
from crg.build import build_crg
from crg.corpus import read_corpus
from crg.divergence import compound_divergence
from crg.graph_cache import get_or_build_graph, parser_cache_key
from crg.mcd import (
    MCDConfig, MCDProblem, RefineConfig, _SplitState, build_problem, eligible_candidates, fill_split,
    make_mcd_split, parse_target_cds, refine_split, split_divergences, window_curve,
)
from crg.mcd_output import GraphOptions, MCDCorpora, write_mcd_split


def hand_problem(in_train=None) -> MCDProblem:
    """5 compounds, 4 atoms, 6 candidates; see the comments for what each candidate is."""
    comp = np.array([
        [2, 0, 0, 0, 0],   # 0: the most common training compound
        [1, 1, 0, 0, 0],   # 1: common compounds
        [0, 0, 1, 1, 0],   # 2: a rare and an unseen compound
        [0, 0, 0, 1, 1],   # 3: two unseen compounds
        [1, 0, 0, 0, 0],   # 4: common compound, but atom a3 training never saw -> dropped
        [0, 0, 0, 0, 0],   # 5: no compound (no usable caption) -> dropped
    ], dtype=float)
    atoms = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [1, 0, 0, 0]], float)
    return MCDProblem(
        compound_vocab=[f"c{k}" for k in range(5)], atom_vocab=[f"a{k}" for k in range(4)],
        train_compounds=np.array([10.0, 5.0, 1.0, 0.0, 0.0]), train_atoms=np.array([5.0, 5.0, 1.0, 0.0]),
        candidate_ids=[f"img{i}" for i in range(6)], candidate_compounds=sp.csr_matrix(comp),
        candidate_atoms=sp.csr_matrix(atoms),
        in_train=np.zeros(6, bool) if in_train is None else np.asarray(in_train, bool))


def random_problem(seed, n=14, v=9, a=5, held_out=False) -> MCDProblem:
    rng = np.random.default_rng(seed)
    comp = sp.random(n, v, density=0.3, random_state=rng, data_rvs=lambda k: rng.integers(1, 4, k)).tocsr()
    comp = comp + sp.csr_matrix((np.ones(n), (np.arange(n), rng.integers(0, v, n))), shape=(n, v))
    atoms = sp.random(n, a, density=0.4, random_state=rng, data_rvs=lambda k: rng.integers(1, 3, k)).tocsr()
    in_train = rng.random(n) < 0.5 if held_out else np.zeros(n, bool)
    train_c = rng.integers(0, 6, v).astype(float) + np.asarray(comp[np.flatnonzero(in_train)].sum(0)).ravel()
    train_a = rng.integers(1, 4, a).astype(float) + np.asarray(atoms[np.flatnonzero(in_train)].sum(0)).ravel()
    return MCDProblem([f"c{k}" for k in range(v)], [f"a{k}" for k in range(a)], train_c, train_a,
                      [f"i{k}" for k in range(n)], sp.csr_matrix(comp), sp.csr_matrix(atoms), in_train)


# ------------------------------------------------------------------ the procedure on hand-made counts
def test_filter_drops_unseen_primitives_and_compound_free_images():
    eligible, unseen, empty = eligible_candidates(hand_problem())
    assert eligible.tolist() == [True, True, True, True, False, False]
    assert unseen.tolist() == [False, False, False, False, True, False]
    assert empty.tolist() == [False, False, False, False, False, True]


def test_top_k_takes_the_divergent_end_of_the_ranking():
    problem = hand_problem()
    result = make_mcd_split(problem, MCDConfig(num_images=2, num_random=20, seed=1, max_atom_divergence=None))
    assert result.direction == "ascending"  # most negative Delta_i first
    assert sorted(result.selected.tolist()) == [2, 3]
    assert result.order[:2].tolist() == [3, 2]
    assert np.isnan(result.deltas[[4, 5]]).all()
    assert (result.deltas[[2, 3]] < 0).all() and (result.deltas[[0, 1]] > 0).all()
    assert result.num_dropped_unseen_atoms == 1 and result.num_dropped_no_compounds == 1
    # exact: eval counts c2 + c3 = (0, 0, 1, 2, 1) against training (10, 5, 1, 0, 0)
    assert result.compound_divergence == pytest.approx(compound_divergence([10, 5, 1, 0, 0], [0, 0, 1, 2, 1]))
    assert result.compound_divergence > result.random_compound.mean() > result.opposite_compound_divergence
    forced = make_mcd_split(problem, MCDConfig(num_images=2, direction="descending", max_atom_divergence=None))
    assert sorted(forced.selected.tolist()) == [0, 1]
    assert forced.compound_divergence == pytest.approx(result.opposite_compound_divergence)


def test_too_few_candidates_is_a_clear_error():
    with pytest.raises(ValueError, match=r"only 4 of 6 candidates remain.*--num-images <= 4"):
        make_mcd_split(hand_problem(), MCDConfig(num_images=5))


@pytest.mark.parametrize("seed", range(4))
def test_mcd_beats_random_sets_and_refinement_stays_below_the_brute_force_optimum(seed):
    problem = random_problem(seed)
    k = 4
    result = make_mcd_split(problem, MCDConfig(num_images=k, num_random=30, seed=seed, max_atom_divergence=None,
                                               refine=RefineConfig(max_rounds=50, swaps_per_round=4)))
    eligible = np.flatnonzero(result.eligible)
    best = max(split_divergences(problem, list(s))[0] for s in itertools.combinations(eligible, k))
    assert result.unrefined_compound_divergence > result.random_compound.mean()
    assert result.unrefined_compound_divergence - 1e-12 <= result.compound_divergence <= best + 1e-12
    assert result.compound_divergence == pytest.approx(split_divergences(problem, result.selected)[0])
    assert len(set(result.selected.tolist())) == k


def test_within_corpus_candidates_leave_training_and_auto_takes_the_better_end():
    # candidates are the training images themselves: CD_ALL = 0 and every Delta_i >= 0, so the
    # first-order argument for the ascending end vanishes; "auto" evaluates both ends exactly
    problem = random_problem(3, n=30, v=12, a=6)
    problem.train_compounds = np.asarray(problem.candidate_compounds.sum(0)).ravel()
    problem.train_atoms = np.asarray(problem.candidate_atoms.sum(0)).ravel() + 1
    problem.in_train[:] = True
    result = make_mcd_split(problem, MCDConfig(num_images=5, num_random=20, max_atom_divergence=None))
    assert result.pool_compound_divergence == pytest.approx(0.0, abs=1e-12)
    assert np.nanmin(result.deltas) >= -1e-12
    flipped = "descending" if result.direction == "ascending" else "ascending"
    other = make_mcd_split(problem, MCDConfig(num_images=5, num_random=0, max_atom_divergence=None, direction=flipped))
    assert result.compound_divergence >= other.compound_divergence
    assert other.compound_divergence == pytest.approx(result.opposite_compound_divergence)
    assert result.compound_divergence > result.random_compound.mean()
    held = problem.train_compounds - np.asarray(problem.candidate_compounds[result.selected].sum(0)).ravel()
    evals = np.asarray(problem.candidate_compounds[result.selected].sum(0)).ravel()
    assert result.compound_divergence == pytest.approx(compound_divergence(held, evals))


@pytest.mark.parametrize("held_out", [False, True])
def test_window_scan_equals_exact_divergence_of_every_window(held_out):
    problem = random_problem(7, n=17, held_out=held_out)
    order = np.random.default_rng(0).permutation(17)
    starts, comp, atom = window_curve(problem, order, 5, stride=2)
    assert starts.tolist() == list(range(0, 13, 2))
    for s, c, a in zip(starts, comp, atom):
        exact = split_divergences(problem, order[s:s + 5])
        assert (c, a) == pytest.approx(exact, abs=1e-10)


def test_incremental_state_matches_recomputation_after_many_moves():
    problem = random_problem(11, n=20, held_out=True)
    state = _SplitState(problem, 0.1, 0.5)
    rng = np.random.default_rng(5)
    for _ in range(200):
        i = int(rng.integers(0, 20))
        (state.remove if state.member[i] else state.add)(i)
        if state.member.any():
            exact = split_divergences(problem, np.flatnonzero(state.member))
            assert (state.comp.divergence(), state.atom.divergence()) == pytest.approx(exact, abs=1e-10)


def test_held_out_selection_never_leaves_a_primitive_unseen_in_training():
    problem = hand_problem(in_train=[True, True, False, False, False, False])
    problem.train_compounds = problem.train_compounds + np.array([3.0, 1.0, 0, 0, 0])
    problem.train_atoms = np.array([2.0, 1.0, 1.0, 0.0])  # a0 seen only in candidates 0 and 1
    # a1: training holds only candidate 1's occurrence -> candidate 1 itself is ineligible
    _, unseen, _ = eligible_candidates(problem)
    assert unseen.tolist() == [False, True, False, False, True, False]
    problem.train_atoms = np.array([2.0, 2.0, 1.0, 0.0])
    # taking 0 and then 1 would leave a0 with no training occurrence: 1 is skipped
    assert fill_split(problem, np.array([0, 1, 2, 3]), 0, 2).tolist() == [0, 2]


def test_refinement_never_lowers_the_divergence_and_respects_the_atom_cap():
    problem = random_problem(2, n=40, v=15, a=8, held_out=True)
    start = np.arange(6)
    before = split_divergences(problem, start)
    refined, stats = refine_split(problem, start, RefineConfig(max_rounds=20, swaps_per_round=5))
    assert len(refined) == 6 and stats.compound_after >= before[0] and stats.swaps > 0
    _, stats2 = refine_split(problem, start, RefineConfig(max_rounds=20, max_atom_divergence=before[1]))
    assert stats2.atom_after <= before[1] + 1e-12 and stats2.compound_after >= before[0]


def test_same_inputs_and_seed_give_the_same_split_and_targets():
    problem = random_problem(4, n=40, v=15, a=8)
    cfg = MCDConfig(num_images=8, seed=3, target_cds=(0.2, 0.4))
    a, b = make_mcd_split(problem, cfg), make_mcd_split(problem, cfg)
    assert a.selected.tolist() == b.selected.tolist()
    assert a.random_compound.tolist() == b.random_compound.tolist()
    assert [t.members.tolist() for t in a.targets] == [t.members.tolist() for t in b.targets]
    for t in a.targets:  # the window closest to the target along the scanned curve
        closest = np.min(np.abs(a.curve_compound - t.target))
        assert abs(t.window_compound_divergence - t.target) == pytest.approx(closest)


def test_doctests():
    import doctest

    import crg.graph_cache
    import crg.mcd

    assert doctest.testmod(crg.mcd).failed == 0 and doctest.testmod(crg.graph_cache).failed == 0


def test_target_spec_parsing():
    assert parse_target_cds("0.15,0.17") == (0.15, 0.17)
    assert parse_target_cds("0.15:max:16") == "0.15:max:16"
    with pytest.raises(ValueError, match="LOW:max:COUNT"):
        parse_target_cds("0.1:0.3")
    with pytest.raises(ValueError, match="numbers"):
        parse_target_cds("0.1,abc")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        MCDConfig(target_cds=(1.5,))


# ------------------------------------------------------------------ tiny corpora through the CRG
TRAIN_CAPTIONS = {
    "t1": ["A dog runs on the grass.", "A dog and a dog play.", "The dog is running on the grass."],
    "t2": ["A man rides a bike on the street.", "A man in a red shirt rides a bike."],
    "t3": ["A woman holds a ball on the grass.", "A dog chases a ball."],
    "t4": ["A man and a woman walk on the street.", "Two people walk a dog."],
}
CAND_CAPTIONS = {
    "c1": ["A dog runs on the grass.", "A dog on the grass."],
    "c2": ["A woman throws a ball to a dog.", "A ball flies over a man."],
    "c3": ["A man repairs a bike on the street.", "A bike leans against a man."],
}


def write_corpus(path, captions, split):
    path.write_text("".join(json.dumps({"image_id": k, "split": split, "captions": v, "extra": k.upper()}) + "\n"
                            for k, v in captions.items()))
    return path


def test_count_matrices_share_one_vocabulary_across_graphs(tmp_path, spacy_parser):
    tg, _ = build_crg(read_corpus(write_corpus(tmp_path / "t.jsonl", TRAIN_CAPTIONS, "train")), spacy_parser,
                      progress=False)
    cg, _ = build_crg(read_corpus(write_corpus(tmp_path / "c.jsonl", CAND_CAPTIONS, "test")), spacy_parser,
                      progress=False)
    problem = build_problem(tg, cg)
    assert problem.candidate_ids == ["c1", "c2", "c3"] and not problem.in_train.any()
    assert len(set(problem.compound_vocab)) == len(problem.compound_vocab)
    col = problem.compound_vocab.index("[NP] runs on [NP]")
    assert problem.candidate_compounds[0, col] == 1 and problem.train_compounds[col] == 1
    # atoms count once per caption: t1's "A dog and a dog play." holds "dog" once
    dog = problem.atom_vocab.index("dog")
    assert problem.train_atoms[dog] == 5  # t1: 3 captions, t3: 1, t4: 1
    assert problem.candidate_atoms[0, dog] == 2
    # compounds count every composition step: the totals match the graph's derivation lists
    assert problem.candidate_compounds.sum() == len(cg.caption_derivs)
    # one graph for both sides: the candidates are training images, held out when selected
    shared = build_problem(tg, tg, train_images=[0, 1, 2, 3], candidate_images=[1, 3])
    assert shared.in_train.tolist() == [True, True] and shared.candidate_ids == ["t2", "t4"]


def test_graph_cache_hits_on_the_second_call_and_predicts_the_spacy_key(tmp_path, spacy_parser):
    assert parser_cache_key("spacy") == spacy_parser.cache_key()
    trees = tmp_path / "trees.txt"
    caps = [c for v in TRAIN_CAPTIONS.values() for c in v]
    trees.write_text("".join(t.pformat(margin=10**9) + "\n" for t in spacy_parser.parse_texts(caps)))
    corpus = write_corpus(tmp_path / "t.jsonl", TRAIN_CAPTIONS, "train")
    opts = dict(parser_name="preparsed", parser_model=str(trees), cache_root=tmp_path / "graphs",
                parse_cache_path=tmp_path / "parse.sqlite", progress=False)
    g1, hit1 = get_or_build_graph(corpus, ["train"], **opts)
    g2, hit2 = get_or_build_graph(corpus, ["train"], **opts)
    assert (hit1, hit2) == (False, True)
    assert g1.predicate_templates == g2.predicate_templates and g2.num_captions == 9
    _, hit3 = get_or_build_graph(corpus, None, **opts)  # other splits: another graph
    assert hit3 is False


def untimed(report):
    """``report`` without its timings and cache hits, at any depth."""
    if isinstance(report, dict):
        return {k: untimed(v) for k, v in report.items() if k not in ("seconds", "run_seconds", "graph_cache_hits")}
    if isinstance(report, list):
        return [untimed(v) for v in report]
    return report


def run_cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "make_mcd_split.py"), *map(str, args), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT)


def test_cli_writes_the_split_and_reruns_identically_from_cached_graphs(tmp_path, spacy_parser):
    train = write_corpus(tmp_path / "train.jsonl", TRAIN_CAPTIONS, "train")
    cands = write_corpus(tmp_path / "cands.jsonl", CAND_CAPTIONS, "test")
    trees = tmp_path / "trees.txt"
    caps = [c for d in (TRAIN_CAPTIONS, CAND_CAPTIONS) for v in d.values() for c in v]
    trees.write_text("".join(t.pformat(margin=10**9) + "\n" for t in spacy_parser.parse_texts(caps)))
    common = ["--train", train, "--train-split", "train", "--candidates", cands, "--candidate-splits", "test",
              "--num-images", "2", "--parser", "preparsed", "--parser-model", trees, "--seed", "4",
              "--graph-cache", tmp_path / "graphs", "--cache", tmp_path / "parse.sqlite", "--target-cds", "0.1,0.9"]
    first = run_cli(*common, "--out", tmp_path / "a")
    assert first.returncode == 0, first.stderr
    second = run_cli(*common, "--out", tmp_path / "b")
    assert second.returncode == 0, second.stderr
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    for key in ("compound_divergence", "atom_divergence", "num_images", "num_captions", "num_dropped_unseen_atoms",
                "random_compound_divergence"):
        assert key in report
    assert report["num_images"] == 2 and report["num_captions"] == 4 and report["num_random_sets"] == 20
    assert len(report["targets"]) == 2
    assert json.loads((tmp_path / "b" / "report.json").read_text())["graph_cache_hits"] == [True, True]
    for name in ("eval.jsonl", "eval_ids.txt"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    rows = [json.loads(line) for line in (tmp_path / "a" / "eval.jsonl").read_text().splitlines()]
    assert all(r["extra"] == r["image_id"].upper() and r["split"] == "test" for r in rows)  # input schema kept
    assert (tmp_path / "a" / "eval_ids.txt").read_text().split() == [r["image_id"] for r in rows]
    assert (tmp_path / "a" / "divergence_along_ranking.png").stat().st_size > 1000
    assert (tmp_path / "a" / "targets" / "cd_0.100" / "eval.jsonl").exists()
    assert not (tmp_path / "a" / "train_ids.txt").exists()  # nothing held out in a cross-corpus split



def test_write_mcd_split_writes_what_the_cli_writes_and_holds_out_within_a_corpus(tmp_path, spacy_parser):
    train = write_corpus(tmp_path / "train.jsonl", TRAIN_CAPTIONS, "train")
    cands = write_corpus(tmp_path / "cands.jsonl", CAND_CAPTIONS, "test")
    trees = tmp_path / "trees.txt"
    caps = [c for d in (TRAIN_CAPTIONS, CAND_CAPTIONS) for v in d.values() for c in v]
    trees.write_text("".join(t.pformat(margin=10**9) + "\n" for t in spacy_parser.parse_texts(caps)))
    graphs = GraphOptions(parser_name="preparsed", parser_model=str(trees), cache_root=tmp_path / "graphs",
                          parse_cache_path=tmp_path / "parse.sqlite", progress=False)
    written = write_mcd_split(MCDCorpora(train, ("train",), candidates=cands, candidate_splits=("test",)),
                              tmp_path / "lib", MCDConfig(num_images=2, seed=4, target_cds=(0.1, 0.9)), graphs=graphs)
    cli = run_cli("--train", train, "--train-split", "train", "--candidates", cands, "--candidate-splits", "test",
                  "--num-images", "2", "--seed", "4", "--target-cds", "0.1,0.9", "--parser", "preparsed",
                  "--parser-model", trees, "--graph-cache", tmp_path / "graphs", "--cache", tmp_path / "parse.sqlite",
                  "--out", tmp_path / "cli")
    assert cli.returncode == 0, cli.stderr
    report = json.loads((tmp_path / "lib" / "report.json").read_text())
    assert written.to_dict() == report and written.out == tmp_path / "lib"
    assert [d.name for d in written.target_dirs] == ["cd_0.100", "cd_0.900"]
    assert [len(t.members) for t in written.result.targets] == [2, 2]
    cli_report = json.loads((tmp_path / "cli" / "report.json").read_text())
    assert (report["graph_cache_hits"], cli_report["graph_cache_hits"]) == ([False, False], [True, True])
    assert untimed(report) == untimed(cli_report)
    files = sorted(p.relative_to(tmp_path / "lib") for p in (tmp_path / "lib").rglob("*")
                   if p.is_file() and p.suffix not in (".json", ".png"))
    assert len(files) == 6  # eval.jsonl and eval_ids.txt, for the split and each of the two targets
    assert files == sorted(p.relative_to(tmp_path / "cli") for p in (tmp_path / "cli").rglob("*")
                           if p.is_file() and p.suffix not in (".json", ".png"))
    for f in files:
        assert (tmp_path / "lib" / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f

    both = tmp_path / "both.jsonl"  # within one corpus: the selected images leave training
    both.write_text(train.read_text() + cands.read_text())
    within = write_mcd_split(MCDCorpora(both), tmp_path / "within", MCDConfig(num_images=2, num_random=0),
                             graphs=graphs)
    assert within.report["within_corpus"] and within.report["num_held_out_from_train"] == 2
    eval_ids = (tmp_path / "within" / "eval_ids.txt").read_text().split()
    train_ids = (tmp_path / "within" / "train_ids.txt").read_text().split()
    assert len(eval_ids) == 2 and sorted(eval_ids + train_ids) == sorted([*TRAIN_CAPTIONS, *CAND_CAPTIONS])


# ------------------------------------------------------------------ real captions (skipped without ../shared)
def test_real_captions_mcd_split_is_far_above_random(shared_data, spacy_parser, tmp_path):
    f30k = read_corpus(shared_data / "flickr30k" / "captions.jsonl").select("train")
    coco = read_corpus(shared_data / "coco" / "captions.jsonl.gz").select("test")
    f30k.images, coco.images = f30k.images[:800], coco.images[:200]
    tg, _ = build_crg(f30k, spacy_parser, progress=False)
    cg, _ = build_crg(coco, spacy_parser, progress=False)
    problem = build_problem(tg, cg)
    result = make_mcd_split(problem, MCDConfig(num_images=20, num_random=20, seed=0))
    assert result.num_dropped_unseen_atoms > 0
    assert result.direction == "ascending"
    assert result.compound_divergence > result.random_compound.mean() + 3 * result.random_compound.std()
    assert result.compound_divergence > result.opposite_compound_divergence


# ------------------------------------------------------------------ no training image evaluated, no stale file
def _trees_for(tmp_path, spacy_parser):
    trees = tmp_path / "trees.txt"
    caps = [c for d in (TRAIN_CAPTIONS, CAND_CAPTIONS) for v in d.values() for c in v]
    trees.write_text("".join(t.pformat(margin=10**9) + "\n" for t in spacy_parser.parse_texts(caps)))
    return GraphOptions(parser_name="preparsed", parser_model=str(trees), cache_root=tmp_path / "graphs",
                        parse_cache_path=tmp_path / "parse.sqlite", progress=False)


def test_training_images_never_become_evaluation_images_whatever_the_paths_say(tmp_path, spacy_parser):
    graphs = _trees_for(tmp_path, spacy_parser)
    both = tmp_path / "both.jsonl"
    write_corpus(tmp_path / "t.jsonl", TRAIN_CAPTIONS, "train")
    write_corpus(tmp_path / "c.jsonl", CAND_CAPTIONS, "test")
    both.write_text((tmp_path / "t.jsonl").read_text() + (tmp_path / "c.jsonl").read_text())
    # the same file with the format named on one side only is one corpus
    named = MCDCorpora(both, train_format="jsonl", candidates=both)
    assert named.within_corpus
    # a copy at another path is another corpus: its training images are excluded from the candidates
    copy = tmp_path / "copy.jsonl"
    copy.write_text(both.read_text())
    with pytest.raises(ValueError, match="every candidate image .* is a training image"):
        write_mcd_split(MCDCorpora(both, candidates=copy), tmp_path / "x", MCDConfig(num_images=2), graphs=graphs)
    # trained on the original's train split, choosing among all the copy's images: its train images are out
    out = write_mcd_split(MCDCorpora(both, ("train",), candidates=copy),
                          tmp_path / "copy_split", MCDConfig(num_images=2, num_random=0), graphs=graphs)
    assert out.report["candidates_excluded_as_training_images"] == len(TRAIN_CAPTIONS)  # the copy's train images
    chosen = (tmp_path / "copy_split" / "eval_ids.txt").read_text().split()
    assert len(chosen) == 2 and not set(chosen) & set(TRAIN_CAPTIONS)


def test_cli_refuses_an_old_split_and_overwrite_leaves_no_stale_file(tmp_path, spacy_parser):
    graphs = _trees_for(tmp_path, spacy_parser)
    write_corpus(tmp_path / "t.jsonl", TRAIN_CAPTIONS, "train")
    write_corpus(tmp_path / "c.jsonl", CAND_CAPTIONS, "test")
    both = tmp_path / "both.jsonl"
    both.write_text((tmp_path / "t.jsonl").read_text() + (tmp_path / "c.jsonl").read_text())
    common = ["--parser", "preparsed", "--parser-model", graphs.parser_model, "--graph-cache", tmp_path / "graphs",
              "--cache", tmp_path / "parse.sqlite", "--num-images", "2", "--num-random", "0"]
    first = run_cli("--train", both, *common, "--target-cds", "0.1,0.9", "--out", tmp_path / "o")
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "o" / "train_ids.txt").exists() and (tmp_path / "o" / "targets").is_dir()
    again = run_cli("--train", tmp_path / "t.jsonl", "--candidates", tmp_path / "c.jsonl", *common, "--out",
                    tmp_path / "o")
    assert again.returncode != 0 and "--overwrite" in again.stderr
    over = run_cli("--train", tmp_path / "t.jsonl", "--candidates", tmp_path / "c.jsonl", *common, "--out",
                   tmp_path / "o", "--overwrite")
    assert over.returncode == 0, over.stderr
    # a cross-corpus split holds nothing out of training, and has no target windows this time
    assert not (tmp_path / "o" / "train_ids.txt").exists() and not (tmp_path / "o" / "targets").exists()
    eval_ids = (tmp_path / "o" / "eval_ids.txt").read_text().split()
    assert eval_ids and not set(eval_ids) & set(TRAIN_CAPTIONS)
