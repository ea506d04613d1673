"""The page's panels, one module each: it builds its components where the page places them and wires its own events;
its handlers are plain functions of typed values (ui/controls.py) answering Updates by slot (ui/wiring.py). No panel
imports another: what several share lives in ui/.

  writer.py        the writer's text, its caret, Append
  suggestions.py   one model's branches, plot and status; taking a branch or a token (built once per model)
  compare.py       "Compare with…": a second model's suggestions beside the first
  sampling.py      the sampling settings, the branches' shape, presets
  constrain.py     a choice, regex, JSON schema or grammar from the caret
  why.py           what drives the model towards a token
  heatmap.py       the text coloured by the model's probabilities
  ledger.py        who wrote what: the writer's share and the model's, the bits spent choosing; the export for analysis
  futures.py       the map of futures at the caret, as blocks: zoom in, insert one
  history.py       the tree of every text, undo and redo, export and import, this browser's copy
  chat.py          a conversation's turns
  continuation.py  Continue, streamed, with lossless lookahead decoding
"""
