"""The in-process backend's request runners: each runs one request type with the model in this process, against the
stores of the backend that asked (lookahead/backends/in_process_stores.py).

  branches.py     a lookahead's branches, and the distribution of the next token
  scores.py       every token's probability and likeliest alternatives (the heatmap)
  reads.py        a long text's answers while it is read in the background
  comparison.py   two models on one text
  generation.py   a continuation, pass by pass
  attribution.py  each token's share in the probability of the next
"""
