# SPDX-License-Identifier: ISC
"""tests/model/test_model.py: the model-based test's runner: a real
idemd and the model of SPEC.md (model.py) driven side by side by
Hypothesis's RuleBasedStateMachine (IdemMachine, machine.py).

It owns the run: the kept regression sequences (regressions.py)
replayed step by step, then the random search, seed by seed for a time
budget, each failure printed with its shrunk sequence and its seed, and
the run's figures.  The rest is elsewhere: the shared settings,
failures and figures in harness.py, the broker's process in broker.py,
the draws in strategies.py, the rules and invariants in machine.py and
machine_effects.py.  test_model_pg.py sets MACHINE to its own.

Run by tests/model/run.sh (make check).  Environment:
  IDEMD, IDEMCTL        the binaries (make check sets them)
  IDEM_MODEL_BUDGET     seconds of random exploration (default 120)
  IDEM_MODEL_SEED       replay this seed only (printed by every run)
  IDEM_MODEL_DB         Hypothesis's example database (the build tree)
  IDEM_MODEL_STEPS      steps per sequence (default 40)
  IDEM_MODEL_KNOWN      defects whose regression sequences are skipped,
                        comma-separated names of KNOWN_DEFECTS
                        (harness.py; see regressions.py); unset: every
                        one runs
  IDEM_SANITIZER_FLAGS  a sanitizer build: timeouts scaled by SLOWDOWN
"""

import os
import random
import sys
import time

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
from harness import (KNOWN, KNOWN_DEFECTS, RUN, SLOWDOWN,  # noqa: E402
                     STATE_KINDS, STATS, BudgetSpent, ModelFailure,
                     RegressionSkipped)
from machine import IdemMachine  # noqa: E402

MACHINE = IdemMachine       # test_model_pg.py sets its own


def run_seed(seed, seconds, steps, db):
    """Hypothesis for SECONDS over sequences of at most STEPS steps from
    SEED; raises on the first (shrunk) failure."""
    RUN["deadline"] = time.time() + seconds
    RUN["failed"] = False
    RUN["first"] = None
    s = settings(max_examples=1000000, stateful_step_count=steps,
                 deadline=None, database=db, print_blob=True,
                 suppress_health_check=list(HealthCheck),
                 report_multiple_bugs=False)
    MACHINE._hypothesis_internal_use_seed = seed
    MACHINE.TestCase.settings = s
    run_state_machine_as_test(MACHINE, settings=s)


class Draws:
    """A rule's `data` in a kept sequence: the values Hypothesis drew
    (its "Draw n:" lines), in order."""

    def __init__(self, values):
        self.values = list(values)

    def draw(self, strategy):
        del strategy
        return self.values.pop(0)


def has_model_failure(e):
    c = e.__context__ or e.__cause__
    while c is not None and not isinstance(c, ModelFailure):
        c = c.__context__ or c.__cause__
    return c is not None


def run_regressions(known):
    # pylint: disable=import-outside-toplevel
    """Every shrunk failure kept in regressions.py, replayed as it was
    found.  Those of a defect named in KNOWN (IDEM_MODEL_KNOWN) are
    listed as skipped, with the reason."""
    import regressions
    failed = 0
    pending = regressions.PENDING
    if os.environ.get("IDEM_MODEL_PENDING") == "none":
        pending = set()
    for name, defect, steps in regressions.REGRESSIONS:
        if defect in known or defect in pending:
            print("SKIP: regression %s (%s: %s; %s)" % (
                name, defect, KNOWN_DEFECTS.get(defect, "?"),
                "IDEM_MODEL_KNOWN" if defect in known else
                "PENDING in regressions.py"))
            continue
        mach = MACHINE()
        try:
            for rule_name, kw in steps:
                if "data" in kw:
                    kw = dict(kw, data=Draws(kw["data"]))
                getattr(mach, rule_name)(**kw)
                mach.files()
                mach.log_clean()
            print("PASS: regression %s" % name)
        except RegressionSkipped as e:
            print("SKIP: regression %s (%s)" % (name, e))
        except ModelFailure as e:
            print("FAIL: regression %s (defect %s): %s" % (name, defect,
                                                             e))
            failed += 1
        finally:
            mach.teardown()
    return failed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    vec = os.environ.get("IDEM_VECTORS", os.path.join(here, "..",
                                                      "vectors"))
    n = M.check_vectors(vec)
    print("PASS: the model's digests agree with %d vectors" % n)
    # A sanitizer build is about five times slower a step: twice the
    # time, for fewer steps (its timeouts are scaled by SLOWDOWN).
    budget = float(os.environ.get("IDEM_MODEL_BUDGET", "120")) * (
        2 if SLOWDOWN > 1 else 1)
    steps = int(os.environ.get("IDEM_MODEL_STEPS", "40"))
    known = KNOWN
    dbdir = os.environ.get("IDEM_MODEL_DB")
    db = DirectoryBasedExampleDatabase(dbdir) if dbdir else None
    started = time.time()
    failed = 0
    only = os.environ.get("IDEM_MODEL_SEED")
    if only is None or os.environ.get("IDEM_MODEL_REGRESSIONS_ONLY"):
        failed += run_regressions(known)
        if os.environ.get("IDEM_MODEL_REGRESSIONS_ONLY"):
            print("%d failure(s)" % failed)
            return 1 if failed else 0
    if only is not None:
        seeds = [int(only)]
    else:
        fresh = random.SystemRandom().randrange(1 << 32)
        seeds = [1, fresh]
        print("seeds %s, %.0f s each" % (seeds, budget / 2))
    i = 0
    while True:
        if i < len(seeds):
            seed = seeds[i]
        elif only is None and time.time() - started < budget:
            seed = random.SystemRandom().randrange(1 << 32)
            print("fresh seed %d" % seed)
        else:
            break
        if only is None and i > 0 and time.time() - started >= budget:
            print("budget of %.0f s spent: seeds %s not run" % (
                budget, seeds[i:]))
            break
        i += 1
        print("seed %d (replay: IDEM_MODEL_SEED=%d)" % (seed, seed),
              flush=True)
        t = time.time()
        try:
            try:
                run_seed(seed, max(5.0, budget / 2 if only is None else
                                   budget), steps, db)
            except BudgetSpent:
                pass
            print("PASS: seed %d, %.0f s" % (seed, time.time() - t),
                  flush=True)
        except (ModelFailure, Flaky) as e:
            if isinstance(e, Flaky) and not has_model_failure(e) and \
                    not RUN["failed"]:
                # The broker answered one sequence two ways within the
                # contract (a lease's end, a retry's moment) and
                # Hypothesis cannot replay it: no failure was seen.
                print("note: seed %d ended early: %s" % (seed, e))
                continue
            if isinstance(e, Flaky):
                # A real broker is not a pure function of the sequence
                # (a lease's end, a checkpoint's moment): Hypothesis saw
                # the failure and could not replay it the same way.
                # The failure itself is the exception's context, or
                # (Hypothesis's tree of draws raised Flaky when no
                # exception was being handled) the first one fail()
                # saw in this seed.
                print("FAIL: seed %d: %s" % (seed, e), flush=True)
                c = e.__context__ or e.__cause__
                while c is not None and not isinstance(c, ModelFailure):
                    c = c.__context__ or c.__cause__
                if c is not None:
                    print("FAIL: seed %d, first seen: %s" % (seed, c))
                    e = c
                else:
                    print("FAIL: seed %d, first seen: %s" % (
                        seed, RUN["first"] or "an exception of the "
                        "sequence (not the model's), not replayed"))
            else:
                print("FAIL: seed %d: %s" % (seed, e), flush=True)
            # Hypothesis puts the shrunk sequence in the exception's
            # notes (Python 3.11): print it, to be kept in
            # regressions.py.
            for line in getattr(e, "__notes__", []):
                print("| " + line)
            print("replay: IDEM_MODEL_SEED=%d %s" % (seed, sys.argv[0]))
            failed += 1
            break
    print("figures: %d sequences, %d steps, %d requests, %d tasks "
          "created, %d transient retries, %d restarts, %d kills, "
          "%d distinct (rule, answer, table fill) states, %.0f s" % (
              STATS["sequences"], STATS["steps"], STATS["requests"],
              STATS["created"], STATS["transient_retries"],
              STATS["restarts"], STATS["kills"], len(STATE_KINDS),
              time.time() - started))
    if os.environ.get("IDEM_MODEL_STATES"):
        for s in sorted(STATE_KINDS):
            print("state: %s %s %s" % s)
    print("%d failure(s)" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
