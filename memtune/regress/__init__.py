"""``memtune diff`` and ``memtune bisect``: which change made a job stop fitting.

- :mod:`attribution`: two configs, the peak of every pipeline rank before and after, and the
  change of each component attributed to each differing key (alone) and to their interactions;
- :mod:`walk`: from config A to config B one key at a time, the first change after which the
  most-loaded rank no longer fits (estimator, or ``memtune measure`` on a GPU);
- :mod:`logs`: two runs' memory reports side by side, per rank and step;
- :mod:`gitbisect` and :mod:`classify`: a git bisection, each commit tested in a temporary
  worktree, with a classifier built on ``memtune diagnose``.
"""
