"""Five allocations over four hours, read every minute; the pool's window is 2 hours.

- busy: a whole card at 60 % all along: never idle.
- idle: a whole card, busy until 200 minutes ago, then 1 % and 100 MiB: idle 200 minutes.
- exempt: as idle, but exempted: reported idle, never warned.
- busy_slice: a 50 % slice running 60 % (the card's) with 4 GiB; idle_slice: a 25 %
  slice on the same card with nothing running since 150 minutes ago: idle 150 minutes
  (the card's utilization is not its own: its owner runs nothing there).
- recent: a 25 % slice placed 90 minutes ago, nothing running: not yet the window long.
"""

CARDS = 4
READ_MINUTES = 240
WINDOW_MINUTES = 120

# name: compute/memory (or whole_card), placed (minutes ago), use: spans of
# (from minutes ago, to minutes ago, utilization %, memory MiB).
ALLOCATIONS = {
    "busy": {"whole_card": True, "placed": 240, "use": [(240, 0, 60, 20000)]},
    "idle": {"whole_card": True, "placed": 240, "use": [(240, 200, 40, 9000), (200, 0, 1, 100)]},
    "exempt": {"whole_card": True, "placed": 240, "use": [(240, 200, 40, 9000), (200, 0, 1, 100)]},
    "busy_slice": {"compute_pct": 50, "memory_mib": 16384, "placed": 240,
                   "use": [(240, 0, 60, 4096)]},
    "idle_slice": {"compute_pct": 25, "memory_mib": 8192, "placed": 240,
                   "use": [(240, 150, 30, 2048)]},
    "recent": {"compute_pct": 25, "memory_mib": 8192, "placed": 90, "use": []},
}  # fmt: skip
IDLE_MINUTES = {"idle": 200, "exempt": 200, "idle_slice": 150}
# GPU-hours wasted: idle minutes x share of a card.
WASTED = {"idle": 200 / 60, "exempt": 200 / 60, "idle_slice": 150 / 60 * 0.25}
