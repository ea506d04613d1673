"""The page: its panels (ui/panels/), the wiring they share (wiring.py, controls.py, ordering.py, errors.py,
handlers.py), what several panels read or answer (on_screen.py, history_updates.py, heatmap_update.py, turns.py), the
endpoints (endpoints.py), renderers and the logic of chat, constraints and the heatmap, scripts and styles (static/).
"""
