"""A long text answers at once, then exactly.

A text the session has not read yet (a paste, an import, a model switch) costs a forward pass over all
its tokens before anything can be suggested: ~25 s for 8k tokens on a 2-core CPU, with the cores busy for
everyone. Instead, a lookahead that would have more than `window` tokens to read answers at once from the
text's last `window` tokens (a partial answer, labelled so), while a background thread reads the text into
the session's cache as a long job (lookahead/scheduler.py): its slices yield to every interactive request,
and an edit elsewhere in the text, Stop, a closed tab or a newer read cancel it. Once the text is read, the
session's next call answers exactly, from the cache, running only the text's last token with the branches.

Reads run in one thread, taking turns chunk by chunk. A text is read in chunks that begin at multiples of
READ_CHUNK_TOKENS, whatever was read before: the boundaries depend on token positions alone, so a text read
twice, or read after an interruption, gives the same bits. For a session that scores its tokens (the heatmap
shown) each chunk is scored as it goes (lookahead/scoring.py): meanwhile the heatmap lists the tokens of the chunks
scored so far (`Read.rows`), and it is whole when the read ends.
`window` is measured, not assumed: the tokens this machine reads in FIRST_ANSWER_SECONDS, timed on one chunk.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

from lookahead.cache_passes import extend_cache
from lookahead.kv_cache import GrowableCache
from lookahead.prefix_cache import PrefixCacheStore
from lookahead.scheduler import Cancelled, Job, scheduler
from lookahead.scoring import Scores, extend_and_score

READ_CHUNK_TOKENS = 512  # a read's chunks begin at multiples of this: the same bits however it was interrupted
# The model's share of a first answer's two seconds; the branches' later steps, the reply and the page take the rest.
FIRST_ANSWER_SECONDS = float(os.environ.get("LOOKAHEAD_FIRST_ANSWER_SECONDS", "1.0"))
MIN_WINDOW_TOKENS = 128  # a partial answer reads at least this much of the text, however slow the machine
# A text with at most this many windows to read is read within the call: answering from its window first would
# save too little to pay for reading that window twice (a crowd of ~600-token texts would get slower, not faster).
READ_IN_CALL_WINDOWS = 1.5
log = logging.getLogger(__name__)


@dataclass(eq=False)
class Read:
    """One session's text being read into its cache: all its tokens but the last (`ids`)."""

    key: Hashable
    ids: tuple[int, ...]
    next_id: int  # the token after them (the call that follows the read runs it)
    model: PreTrainedModel
    job: Job
    scored: bool  # whether each token is scored too (a session showing the heatmap)
    read_tokens: int = 0  # of `ids`, in the cache so far
    cache: DynamicCache | None = None  # being filled, between chunks
    # The scores of the tokens read so far, when scored: replaced whole after each chunk, never changed in place, so
    # a request thread that takes it gets the rows of whole chunks (a partial heatmap) while this one reads on.
    rows: Scores | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    answers: dict[Hashable, dict] = field(default_factory=dict)  # partial answers given, by request
    waiting: bool = False  # planned and not yet queued (`Reader.begin`): its first answer is given first

    def serves(self, ids: Sequence[int], scored: bool) -> bool:
        """Whether this read leads to `ids` (they begin with its tokens), scored if need be."""
        return (self.scored or not scored) and len(ids) > len(self.ids) and tuple(ids[: len(self.ids)]) == self.ids


class Reader:
    """Each session's read (one at most), read by one thread a chunk at a time in turn, and the measured window
    of a first answer. One thread: a crowd's reads share the cores no faster together, and each visitor's
    partial answers carry them meanwhile; in turn: a short text is not read after a long one."""

    def __init__(self, store: PrefixCacheStore) -> None:
        self.store = store
        self._reads: dict[Hashable, Read] = {}  # by session key: queued or under way
        self._queue: deque[Read] = deque()
        self._windows: dict[str, int] = {}  # model name -> tokens a first answer reads
        self._lock = threading.Lock()
        self._queued = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None
        self._closed = False  # the process is exiting: the thread ends

    def window(self, name: str, model: PreTrainedModel) -> int:
        """How many of a text's last tokens this machine reads within FIRST_ANSWER_SECONDS (measured once: the app
        measures it as it starts, while the machine is idle)."""
        with self._lock:
            if name not in self._windows:
                self._windows[name] = max(MIN_WINDOW_TOKENS, int(FIRST_ANSWER_SECONDS * _tokens_per_second(model)))
            return self._windows[name]

    def following(self, key: Hashable, request: Hashable) -> Read | None:
        """The read under way whose partial answer to `request` was given: asked again, it is given again."""
        with self._lock:
            read = self._reads.get(key)
        return read if read is not None and request in read.answers and not read.finished.is_set() else None

    def plan(self, key: Hashable, ids: Sequence[int], name: str, model: PreTrainedModel,
             scored: bool = False, begin: bool = True) -> Read | None:
        """The read that leads to `ids`, queued if need be (not yet where `begin` is False: the caller gives its first
        answer first, with the cores, and then calls `begin`); None when the session's cache leaves at most
        READ_IN_CALL_WINDOWS windows to read (the call then reads them itself). A read the session no longer
        needs (its text was edited before the end of what it reads) is cancelled first, keeping what it read."""
        if FIRST_ANSWER_SECONDS <= 0 or self._closed:
            return None
        with self._lock:
            read = self._reads.get(key)
        if read is not None and not read.finished.is_set() and read.serves(ids, scored):
            return read
        if read is not None:
            self._stop(read)
        held = self.store.shared(key, ids, scored)
        end = len(ids) - 1  # the last token is left for the call that follows, which runs it with the branches
        if end - held <= READ_IN_CALL_WINDOWS * MIN_WINDOW_TOKENS:  # short: not worth timing the window for
            return None
        if end - held <= READ_IN_CALL_WINDOWS * self.window(name, model):
            return None
        question = tuple(ids[:end])
        read = Read(key, question, ids[end], model, scheduler.start(key[1], "read", question, name), scored,
                    waiting=True)
        with self._lock:
            self._reads[key] = read
        if begin:
            self.begin(read)
        return read

    def begin(self, read: Read) -> None:
        """Queue a planned read (once only; one cancelled before it began has ended)."""
        with self._lock:
            if not read.waiting:
                return
            read.waiting = False
            self._queue.append(read)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="read", daemon=True)
                self._worker.start()
            self._queued.notify_all()

    def wait(self, session: str | None = None) -> None:
        """Until the reads of `session` (or all), queued or under way, have ended."""
        with self._lock:
            reads = [read for key, read in self._reads.items() if session in (None, key[1])]
        for read in reads:
            read.finished.wait()

    def stop(self, session: str | None = None) -> None:
        """Cancel the reads of `session` (or all), queued or under way; return once they have ended."""
        with self._lock:
            reads = [read for key, read in self._reads.items() if session in (None, key[1])]
        for read in reads:
            self._stop(read)

    def close(self) -> None:
        """Cancel every read and end the reading thread (at exit: a daemon thread still running as the interpreter
        shuts down is killed wherever it is, and inside torch that aborts the process)."""
        self.stop()
        with self._lock:
            self._closed = True
            self._queued.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join()

    def _stop(self, read: Read) -> None:
        scheduler.stop(read.job)
        with self._lock:
            queued = read in self._queue or read.waiting
            if read in self._queue:
                self._queue.remove(read)
            read.waiting = False
        if queued:  # between two of its chunks, or not begun: this thread ends it
            self._finish(read)
        read.finished.wait()

    def _work(self) -> None:
        """The reading thread, until the process exits: one chunk of the first read in the queue, which
        then goes to its back. Reads take turns chunk by chunk, so a short text is never read after a long one."""
        while True:
            with self._lock:
                self._queued.wait_for(lambda: self._queue or self._closed)
                if self._closed:
                    break
                read = self._queue.popleft()
            more = self._read_chunk(read)
            with self._lock:
                if more:
                    self._queue.append(read)
            if not more:
                self._finish(read)

    def _read_chunk(self, read: Read) -> bool:
        """Read the next chunk of `read.ids` into the session's cache (scoring its tokens if asked); whether
        there is more to read."""
        try:
            if read.cache is None:
                read.cache, read.read_tokens, read.rows = self.store.take(read.key, (*read.ids, read.next_id),
                                                                          scored=read.scored)
            ends = chunk_ends(read.read_tokens, len(read.ids))
            if not ends or read.job.cancelled:
                return False
            ids = torch.tensor([read.ids[: ends[0]]], device=read.model.device)
            with scheduler.sliced(read.job), torch.inference_mode():
                if read.scored:
                    _, read.rows = extend_and_score(read.model, ids, read.cache, read.rows)
                else:
                    extend_cache(read.model, ids, read.cache)
            read.read_tokens = ends[0]
            return len(ends) > 1
        except Cancelled:
            return False
        except Exception:  # noqa: BLE001 - a failed read must not take the process down: the call reads instead
            log.exception("reading a long text failed; the next call reads it instead")
            return False

    def _finish(self, read: Read) -> None:
        """Store what `read` read (all of it or, once cancelled, its whole chunks), and end it."""
        done, cache, rows = read.read_tokens, read.cache, read.rows
        read.cache = None  # its rows stay: a request that took this read may still list them
        if cache is not None and done > 0:
            for layer in cache.layers:  # a chunk cut short left some layers longer than others
                if layer.get_seq_length() > done:
                    layer.crop(done - layer.get_seq_length())
            if rows is not None and len(rows) > done:
                rows = rows.head(done)
            self.store.put(read.key, read.ids[:done], cache, (), rows)
        self._end(read)

    def _end(self, read: Read) -> None:
        scheduler.finish(read.job)
        with self._lock:
            if self._reads.get(read.key) is read:
                del self._reads[read.key]
        read.finished.set()


def chunk_ends(start: int, end: int) -> list[int]:
    """Where the chunks reading tokens [start, end) end: at multiples of READ_CHUNK_TOKENS, and at `end`."""
    first = (start // READ_CHUNK_TOKENS + 1) * READ_CHUNK_TOKENS
    return [*range(first, end, READ_CHUNK_TOKENS), end] if start < end else []


@torch.inference_mode()
def _tokens_per_second(model: PreTrainedModel) -> float:
    """Tokens a cold read of one chunk runs per second here (the faster of two runs)."""
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = torch.randint(vocab, (1, READ_CHUNK_TOKENS), generator=torch.Generator().manual_seed(0)).to(model.device)
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        model(ids, past_key_values=GrowableCache(), use_cache=True, logits_to_keep=1)
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
        seconds.append(time.perf_counter() - start)
    return READ_CHUNK_TOKENS / min(seconds)
