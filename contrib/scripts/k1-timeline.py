#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""
k1-timeline.py: one durable write of a lone client, step by step, on
idemd and on Redis, from a system-wide scheduler and system-call trace
(doc/effects.md, "Where a lone client's write goes").

Record with (as root, while idem-bench --scenario effects --clients 1
runs: both servers are in the same trace, told apart by their names):

    perf record -a -m 128M -o k1.data \
      -e sched:sched_switch --exclude-perf \
      -e sched:sched_waking --exclude-perf \
      -e raw_syscalls:sys_enter --exclude-perf \
      -e raw_syscalls:sys_exit --exclude-perf \
      -e block:block_rq_issue --exclude-perf \
      -e block:block_rq_complete --exclude-perf -- tests/bench/idem-bench \
      --idemd X/idemd --scenario effects --clients 1 --count 4000 --json
    perf script -i k1.data -F comm,tid,cpu,time,event,trace | \
      python3 contrib/scripts/k1-timeline.py

(effects.md's command, its lines split; X/idemd a binary named idemd.)
The system-call numbers below (NR_*) are x86-64's: on another
architecture the script finds nothing.

Each record is anchored on the fdatasync that made it durable (the
journaling thread's, Redis's) and its steps are found around it in the
threads' own events: the client's send, the server's read of the
request, the hand-off to the journaling thread (idemd only), the
pwritev/write, the fdatasync, the hand-back (idemd only), the reply's
write and the client's return from its wait.  Only rounds that took one
request are counted (K=1: all of them); medians, p10 and p90 in us.
"""
import bisect
import re
import statistics
import sys

LINE = re.compile(r'^\s*(.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):'
                  r'\s+(\S+?):?\s+(.*)$')
NR_READ, NR_WRITE, NR_POLL, NR_WRITEV = 0, 1, 7, 20
NR_SENDTO, NR_SENDMSG, NR_FDATASYNC, NR_EPOLL_WAIT = 44, 46, 75, 232
NR_PPOLL, NR_EPOLL_PWAIT, NR_PWRITEV, NR_SCHED_YIELD = 271, 281, 296, 24
SENDS = (NR_WRITE, NR_WRITEV, NR_SENDTO, NR_SENDMSG)


class Thread:
    def __init__(self, tid, comm):
        self.tid = tid
        self.comm = comm
        self.ev = []            # (time, kind, a, b)

    def times(self):
        if not hasattr(self, '_t'):
            self._t = [e[0] for e in self.ev]
        return self._t

    def last(self, before, pred):
        i = bisect.bisect_left(self.times(), before) - 1
        while i >= 0:
            if pred(self.ev[i]):
                return self.ev[i]
            i -= 1
        return None

    def first(self, after, pred, limit=None):
        i = bisect.bisect_right(self.times(), after)
        while i < len(self.ev):
            e = self.ev[i]
            if limit is not None and e[0] > limit:
                return None
            if pred(e):
                return e
            i += 1
        return None


def parse(stream):
    threads = {}
    cpu_cur = {}            # cpu -> tid running (0: idle)
    wakes = []              # (time, waker, wakee, target cpu, idle target)
    blocks = []             # (time, 'I'/'C', sector)
    for line in stream:
        m = LINE.match(line)
        if not m:
            continue
        comm, tid, cpu, t, ev, rest = m.groups()
        tid, cpu, t = int(tid), int(cpu), float(t) * 1e6
        th = threads.get(tid)
        if th is None:
            th = threads[tid] = Thread(tid, comm)
        th.comm = comm          # the latest: exec and prctl rename
        if ev.endswith('sys_enter'):
            nr = int(rest.split()[1])
            th.ev.append((t, 'enter', nr, None))
        elif ev.endswith('sys_exit'):
            f = rest.split()
            th.ev.append((t, 'exit', int(f[1]), int(f[3])))
        elif ev.endswith('sched_switch'):
            prev = int(re.search(r'prev_pid=(\d+)', rest).group(1))
            state = re.search(r'prev_state=(\S+)', rest).group(1)
            nxt = int(re.search(r'next_pid=(\d+)', rest).group(1))
            ncomm = re.search(r'next_comm=(.*?) next_pid', rest).group(1)
            if prev in threads:
                threads[prev].ev.append((t, 'out', state, cpu))
            nt = threads.get(nxt)
            if nt is None:
                nt = threads[nxt] = Thread(nxt, ncomm)
            nt.ev.append((t, 'in', prev, cpu))
            cpu_cur.setdefault(cpu, []).append((t, nxt))
        elif ev.endswith('sched_waking'):
            # In the waker's context (sched_wakeup may be in the
            # target CPU's, after an IPI): who woke whom, and when.
            wakee = int(re.search(r' pid=(\d+)', rest).group(1))
            wakes.append((t, tid, wakee, cpu))
            th.ev.append((t, 'wakes', wakee, None))
        elif ev.endswith('block_rq_issue'):
            blocks.append((t, 'I', rest))
        elif ev.endswith('block_rq_complete'):
            blocks.append((t, 'C', rest))
    return threads, wakes, blocks, cpu_cur


def idle_at(cpu_cur, cpu, t):
    """Was cpu idle (swapper) at time t?"""
    lst = cpu_cur.get(cpu, [])
    i = bisect.bisect_left(lst, (t, -1)) - 1
    return i >= 0 and lst[i][1] == 0


def wake_of(wakes_by, tid, t_in, not_before):
    """The sched_wakeup of tid just before its switch-in at t_in."""
    lst = wakes_by.get(tid, [])
    i = bisect.bisect_left(lst, (t_in, -1, -1, -1)) - 1
    if i >= 0 and lst[i][0] >= not_before:
        return lst[i]
    return None


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def show(name, steps, n):
    print('%s: %d records' % (name, n))
    print('  %-46s %8s %8s %8s %6s' % ('step', 'p50 us', 'p10', 'p90',
                                        'count'))
    for label, vals in steps:
        if not vals:
            print('  %-46s %8s' % (label, '-'))
            continue
        print('  %-46s %8.1f %8.1f %8.1f %6d' % (label,
              statistics.median(vals), pct(vals, 0.1), pct(vals, 0.9),
              len(vals)))


def main():
    threads, wakes, blocks, cpu_cur = parse(sys.stdin)
    wakes_by = {}
    for w in wakes:
        wakes_by.setdefault(w[2], []).append(w)
    btimes = [b[0] for b in blocks]

    def is_call(nr, kind='enter'):
        return lambda e: e[1] == kind and e[2] == nr

    def blockparts(t6, t7):
        """fdatasync split: data issue->complete, flush issue->complete."""
        i = bisect.bisect_left(btimes, t6)
        ev = []
        while i < len(blocks) and blocks[i][0] <= t7:
            ev.append(blocks[i])
            i += 1
        return ev

    syncers = [th for th in threads.values()
               if any(e[1] == 'enter' and e[2] == NR_FDATASYNC
                      for e in th.ev)]
    for server in ('idemd', 'redis'):
        js = [th for th in syncers if th.comm.startswith(
            'idemd' if server == 'idemd' else 'redis')]
        if not js:
            continue
        j = max(js, key=lambda th: len(th.ev))
        workers = [th for th in threads.values()
                   if th.comm.startswith('idemd worker')]
        clients = [th for th in threads.values()
                   if th.comm.startswith('idem-bench') and
                   any(e[1] == 'enter' and e[2] in (NR_POLL, NR_PPOLL)
                       for e in th.ev)]
        rows = {k: [] for k in (
            'send', 'read', 'handoff', 'hwake', 'hrun', 'pwrite', 'sync',
            'back', 'bwake', 'brun', 'reply', 'cwake', 'total',
            'kick_to_in', 'fs_data', 'fs_flush', 'sync_wake', 'srv_woken',
            'srv_wake_lat', 'client_wake_lat', 'handoff_nokick',
            'back_nowake', 'fs_enter_issue', 'fs_gap', 'fs_ios')}
        flags = {'srv_idle_cpu': 0, 'srv_slept': 0, 'h_idle': 0,
                 'b_idle': 0, 'c_idle': 0, 'same_cpu_jw': 0,
                 'h_n': 0, 'b_n': 0, 'c_n': 0, 'h_none': 0, 'b_none': 0}
        n = 0
        first_t = last_t = 0
        for e in j.ev:
            if not (e[1] == 'enter' and e[2] == NR_FDATASYNC):
                continue
            t6 = e[0]
            x = j.first(t6, is_call(NR_FDATASYNC, 'exit'))
            if x is None:
                continue
            t7 = x[0]
            wnr = NR_PWRITEV if server == 'idemd' else NR_WRITE
            pw = j.last(t6, is_call(wnr))
            if pw is None or t6 - pw[0] > 2000:
                continue
            t5 = pw[0]
            if server == 'idemd':
                # The worker whose request this is: the last to read a
                # line (more than an eventfd's 8 bytes) before the write.
                best = None
                for w in workers:
                    r = w.last(t5, lambda e: e[1] == 'exit' and
                               e[2] == NR_READ and e[3] > 8)
                    if r is not None and (best is None or r[0] > best[1][0]):
                        best = (w, r)
                if best is None or t5 - best[1][0] > 3000:
                    continue
                w, rd = best
                t2 = rd[0]
                # Its kick, if the journaler slept: a write of 8 bytes.
                kk = w.first(t2, lambda e: e[1] == 'exit' and
                             e[2] == NR_WRITE and e[3] == 8, t5)
                t3 = w.last(kk[0], is_call(NR_WRITE))[0] if kk else None
                jin = j.last(t5, lambda e: e[1] == 'in')
                # The reply: the worker's first writev after the sync.
                rp = w.first(t7, is_call(NR_WRITEV), t7 + 3000)
                if rp is None:
                    continue
                t10 = rp[0]
                srv = w
                if t3 is not None:
                    flags['h_n'] += 1
                    rows['handoff'].append(t3 - t2)
                    wk = wake_of(wakes_by, j.tid, jin[0], t3) if jin else None
                    if wk is not None:
                        flags['h_idle'] += idle_at(cpu_cur, jin[3], wk[0])
                        rows['kick_to_in'].append(jin[0] - t3)
                        rows['hrun'].append(t5 - jin[0])
                else:
                    flags['h_none'] += 1
                    rows['handoff_nokick'].append(t5 - t2)
                # Back: the journaler's write of the worker's eventfd, if
                # it wrote one, and the worker's wake-up.
                bk = j.first(t7, lambda e: e[1] == 'wakes' and
                             e[2] == w.tid, t10)
                if bk is not None:
                    win = w.first(bk[0], lambda e: e[1] == 'in', t10)
                    flags['b_n'] += 1
                    rows['back'].append(bk[0] - t7)
                    if win is not None:
                        flags['b_idle'] += idle_at(cpu_cur, win[3], bk[0])
                        rows['bwake'].append(win[0] - bk[0])
                        rows['brun'].append(t10 - win[0])
                        flags['same_cpu_jw'] += (jin is not None and
                                                 jin[3] == win[3])
                else:
                    flags['b_none'] += 1
                    rows['back_nowake'].append(t10 - t7)
            else:
                srv = j
                rd = j.last(t5, is_call(NR_READ, 'exit'))
                if rd is None or t5 - rd[0] > 2000:
                    continue
                t2 = rd[0]
                rp = j.first(t7, is_call(NR_WRITE), t7 + 2000)
                if rp is None:
                    continue
                t10 = rp[0]
                rows['handoff'].append(t5 - t2)
                rows['back'].append(t10 - t7)
            # The client: its send before the read, its wake after reply.
            c = None
            for cl in clients:
                s = cl.last(t2, lambda e: e[1] == 'enter' and e[2] in SENDS)
                if s is not None and t2 - s[0] < 5000:
                    if c is None or s[0] > c[1][0]:
                        c = (cl, s)
            if c is None:
                continue
            cl, s = c
            t0 = s[0]
            cin = cl.first(t10, lambda e: e[1] == 'in', t10 + 5000)
            if cin is None:
                continue
            t11 = cin[0]
            cx = cl.first(t11, lambda e: e[1] == 'exit' and
                          e[2] in (NR_POLL, NR_PPOLL, NR_READ), t11 + 2000)
            if cx is None:
                continue
            t12 = cx[0]
            cwk = wake_of(wakes_by, cl.tid, t11, t10)
            if cwk is not None:
                flags['c_n'] += 1
                flags['c_idle'] += idle_at(cpu_cur, cin[3], cwk[0])
                rows['client_wake_lat'].append(t11 - cwk[0])
            # Did the server sleep between the client's send and its read?
            sin = srv.last(t2, lambda e: e[1] == 'in')
            if sin is not None and sin[0] > t0:
                swk = wake_of(wakes_by, srv.tid, sin[0], t0)
                flags['srv_slept'] += 1
                if swk is not None:
                    flags['srv_idle_cpu'] += idle_at(cpu_cur, sin[3], swk[0])
                    rows['srv_wake_lat'].append(sin[0] - swk[0])
            parts = blockparts(t6, t7)
            iss = [b for b in parts if b[1] == 'I']
            comp = [b for b in parts if b[1] == 'C']
            rows['fs_ios'].append(len(iss))
            if iss:
                rows['fs_enter_issue'].append(iss[0][0] - t6)
            if len(iss) >= 2 and len(comp) >= 2:
                rows['fs_gap'].append(iss[-1][0] - comp[0][0])
                rows['fs_data'].append(comp[0][0] - iss[0][0])
                rows['fs_flush'].append(comp[-1][0] - iss[-1][0])
                rows['sync_wake'].append(t7 - comp[-1][0])
            rows['send'].append(t2 - t0)
            rows['pwrite'].append(t6 - t5)
            rows['sync'].append(t7 - t6)
            rows['reply'].append(t12 - t10)
            rows['total'].append(t12 - t0)
            if n == 0:
                first_t = t0
            last_t = t12
            n += 1
        # The fdatasync's own steps, the same on both servers.
        fsync_steps = [
            ('fdatasync', rows['sync']),
            ('  enter -> first I/O issued', rows['fs_enter_issue']),
            ('  data I/O issue -> complete', rows['fs_data']),
            ('  data complete -> flush issued', rows['fs_gap']),
            ('  flush issue -> complete', rows['fs_flush']),
            ('  last completion -> fdatasync returns', rows['sync_wake']),
            ('  I/Os issued', rows['fs_ios']),
        ]
        if server == 'idemd':
            steps = [
                ('client send -> worker read returns', rows['send']),
                ('  worker wake-up latency (when it slept)',
                 rows['srv_wake_lat']),
                ('worker read -> its kick (parse, append)', rows['handoff']),
                ('kick -> journaler on CPU (wake-up)', rows['kick_to_in']),
                ('journaler on CPU -> pwritev', rows['hrun']),
                ('worker read -> pwritev, no kick', rows['handoff_nokick']),
                ('pwritev', rows['pwrite']),
            ] + fsync_steps + [
                ('fdatasync returns -> wake write', rows['back']),
                ('wake write -> worker on CPU (wake-up)', rows['bwake']),
                ('worker on CPU -> reply writev', rows['brun']),
                ('fdatasync returns -> reply, no wake', rows['back_nowake']),
                ('reply writev -> client poll returns', rows['reply']),
                ('  client wake-up latency', rows['client_wake_lat']),
                ('client send -> client poll returns', rows['total']),
            ]
        else:
            steps = [
                ('client send -> redis read returns', rows['send']),
                ('  redis wake-up latency (when it slept)',
                 rows['srv_wake_lat']),
                ('redis read -> AOF write', rows['handoff']),
                ('AOF write', rows['pwrite']),
            ] + fsync_steps + [
                ('fdatasync returns -> reply write', rows['back']),
                ('reply write -> client poll returns', rows['reply']),
                ('  client wake-up latency', rows['client_wake_lat']),
                ('client send -> client poll returns', rows['total']),
            ]
        show(server, steps, n)
        # Every wake-up of the threads on the path over the records'
        # span: onto a CPU that was idle (halted, on a VM) or busy.
        if n:
            lo, hi = first_t, last_t
            role = {j.tid: 'journaler' if server == 'idemd' else 'redis'}
            if server == 'idemd':
                for w in workers:
                    role[w.tid] = 'worker'
            for cl in clients:
                role[cl.tid] = 'client'
            stats = {}
            for w in wakes:
                if w[0] < lo or w[0] > hi or w[2] not in role:
                    continue
                th = threads[w[2]]
                e_in = th.first(w[0], lambda e: e[1] == 'in', w[0] + 20000)
                if e_in is None:
                    continue
                if e_in[3] == w[3]:
                    kind = 0        # on the waker's own CPU
                elif idle_at(cpu_cur, e_in[3], w[0]):
                    kind = 1        # another CPU, idle: an IPI to wake it
                else:
                    kind = 2        # another CPU, busy
                st = stats.setdefault(role[w[2]], ([], [], []))
                st[kind].append(e_in[0] - w[0])
            print('  wake-ups a record (waking -> on CPU), by thread: on '
                  'the waker\'s CPU / another, idle / another, busy; '
                  'count a record, p50 us')
            for r, ks in sorted(stats.items()):
                print('    %-10s %5.2f %5.2f %5.2f   p50 %5.1f %5.1f %5.1f'
                      % ((r,) + tuple(len(k) / n for k in ks) + tuple(
                          statistics.median(k) if k else 0 for k in ks)))
        if n:
            print('  server asleep at the send: %.2f of records, its CPU '
                  'idle then: %.2f of those' % (flags['srv_slept'] / n,
                  flags['srv_idle_cpu'] / max(1, flags['srv_slept'])))
            if server == 'idemd':
                print('  kicks: %.2f of records, the journaler woken on an '
                      'idle CPU: %.2f of those; wakes back: %.2f, the '
                      'worker on an idle CPU: %.2f of those, journaler and '
                      'worker on one CPU: %.2f' % (
                          flags['h_n'] / n,
                          flags['h_idle'] / max(1, flags['h_n']),
                          flags['b_n'] / n,
                          flags['b_idle'] / max(1, flags['b_n']),
                          flags['same_cpu_jw'] / max(1, flags['b_n'])))
            print('  client woken on an idle CPU: %.2f' % (
                flags['c_idle'] / max(1, flags['c_n'])))


if __name__ == '__main__':
    main()
