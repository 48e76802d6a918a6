package main_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// spawnDispatcher is startDispatcher for any goroutine: it returns an error rather than failing the
// test, and leaves the cleanup to the storm.
func spawnDispatcher(bin, cfgPath, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), config.EnvConfig+"="+cfgPath, "RETRYOPS_LOG_LEVEL="+os.Getenv("RETRYOPS_LOG_LEVEL"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

func exited(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// reapLocked notes members that exited on their own (s.mu held).
func (s *storm) reapLocked() {
	for _, m := range s.members {
		if m.p != nil && exited(m.p) && !m.signalled {
			s.crashed = append(s.crashed, fmt.Sprintf("member %d exited unasked at %v: %v", m.id, time.Since(s.started).Round(time.Millisecond), m.p.err))
			m.p = nil
		}
	}
}

func (s *storm) aliveLocked() (alive, down []*stormMember) {
	s.reapLocked()
	for _, m := range s.members {
		if m.p != nil {
			alive = append(alive, m)
		} else {
			down = append(down, m)
		}
	}
	return alive, down
}

// startLocked starts member m (s.mu held) and records the change (not at the storm's start,
// alive < 0).
func (s *storm) startLocked(m *stormMember, alive int) {
	p, err := spawnDispatcher(s.bin, m.cfgPath, m.logPath)
	if err != nil {
		s.crashed = append(s.crashed, fmt.Sprintf("member %d cannot start: %v", m.id, err))
		return
	}
	m.p, m.signalled = p, false
	if alive < 0 {
		return
	}
	s.changes = append(s.changes, stormChange{at: time.Now(), kind: "start", member: m.id, alive: alive, inFlight: s.sink.InFlight()})
}

// killLocked SIGKILLs member m.
func (s *storm) killLocked(m *stormMember, alive int) {
	ch := stormChange{at: time.Now(), kind: "kill", member: m.id, alive: alive, inFlight: s.sink.InFlight()}
	m.signalled = true
	_ = m.p.cmd.Process.Signal(syscall.SIGKILL)
	<-m.p.done
	m.p = nil
	s.changes = append(s.changes, ch)
}

// stopLocked SIGTERMs member m and waits for it to exit (SIGKILL after 30 s, noted as slow).
func (s *storm) stopLocked(m *stormMember, alive int) {
	ch := stormChange{at: time.Now(), kind: "stop", member: m.id, alive: alive, inFlight: s.sink.InFlight()}
	m.signalled = true
	_ = m.p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.p.done:
		if m.p.err != nil {
			s.crashed = append(s.crashed, fmt.Sprintf("member %d exited with %v after SIGTERM", m.id, m.p.err))
		}
	case <-time.After(30 * time.Second):
		s.stopSlow = append(s.stopSlow, fmt.Sprintf("member %d still running 30s after SIGTERM at %v", m.id, ch.at.Sub(s.started).Round(time.Millisecond)))
		_ = m.p.cmd.Process.Kill()
		<-m.p.done
	}
	ch.took = time.Since(ch.at)
	m.p = nil
	s.changes = append(s.changes, ch)
}

// startAll starts every member and waits for all of them to be ready.
func (s *storm) startAll() {
	s.t.Helper()
	s.started = time.Now()
	s.mu.Lock()
	for _, m := range s.members {
		s.startLocked(m, -1)
	}
	s.mu.Unlock()
	dt.Eventually(s.t, 30*time.Second, func() bool {
		for _, m := range s.members {
			if readyz(m.health) != http.StatusOK {
				return false
			}
		}
		return true
	}, "all %d members ready", len(s.members))
	s.t.Logf("%d members ready after %v", len(s.members), time.Since(s.started).Round(time.Millisecond))
}

// churn starts the churn loop: every churnMin..churnMax one change, keeping at least one member
// alive: a member down is started (always when only one is alive, else half the time); otherwise a
// random live member is killed (it stays down until a later start) or stopped and restarted.
func (s *storm) churn(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 13))
	s.churnStop, s.churnDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.churnDone)
		for {
			wait := s.sc.churnMin + time.Duration(rng.Int64N(int64(s.sc.churnMax-s.sc.churnMin)+1))
			select {
			case <-s.churnStop:
				return
			case <-time.After(wait):
			}
			s.mu.Lock()
			if s.paused {
				s.mu.Unlock()
				continue
			}
			alive, down := s.aliveLocked()
			switch {
			case len(down) > 0 && (len(alive) <= 1 || rng.IntN(2) == 0):
				s.startLocked(down[rng.IntN(len(down))], len(alive))
			case len(alive) <= 1:
			case rng.IntN(2) == 0:
				s.killLocked(alive[rng.IntN(len(alive))], len(alive))
			default:
				m := alive[rng.IntN(len(alive))]
				s.stopLocked(m, len(alive))
				s.startLocked(m, len(alive)-1)
			}
			s.mu.Unlock()
		}
	}()
}

func (s *storm) pauseChurn(p bool) {
	s.mu.Lock()
	s.paused = p
	s.mu.Unlock()
}

func (s *storm) stopChurn() {
	if s.churnStop == nil {
		return
	}
	select {
	case <-s.churnStop:
	default:
		close(s.churnStop)
	}
	<-s.churnDone
}

// waitAccounted waits (gomega's Eventually) until every record is delivered or dead-lettered,
// logging progress, and reports the records still missing when it gives up.
func (s *storm) waitAccounted(timeout time.Duration) {
	s.t.Helper()
	var miss []int
	lastLog := time.Now()
	g := gomega.NewGomega(func(string, ...int) {}) // the failure is reported below, with what is missing
	if g.Eventually(func() bool {
		miss = s.missing()
		if len(miss) > 0 && time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			s.mu.Lock()
			nch := len(s.changes)
			s.mu.Unlock()
			s.t.Logf("%v: %d of %d records not yet accounted for, %d requests, %d changes", time.Since(s.started).Round(time.Second), len(miss), s.sc.records, s.sink.Count(), nch)
		}
		return len(miss) == 0
	}).WithTimeout(timeout).WithPolling(250 * time.Millisecond).Should(gomega.BeTrue()) {
		s.t.Logf("all %d records accounted for after %v", s.sc.records, time.Since(s.started).Round(time.Millisecond))
		return
	}
	s.report(miss)
	s.t.Fatalf("after %v, %d records are neither delivered nor dead-lettered", timeout, len(miss))
}

// report describes records still missing: per partition, their offsets, and what the sink saw.
func (s *storm) report(miss []int) {
	byPart := map[string][]string{}
	for _, i := range miss {
		k := s.keyOf[i]
		p := k[:strings.LastIndexByte(k, '/')]
		byPart[p] = append(byPart[p], fmt.Sprintf("%s(i=%d,%s,%d reqs)", k[len(p)+1:], i, s.sc.kind(i), len(s.sink.ByKey(k))))
	}
	var parts []string
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Strings(parts)
	for _, p := range parts {
		rs := byPart[p]
		if len(rs) > 8 {
			rs = append(rs[:8], fmt.Sprintf("... %d in all", len(byPart[p])))
		}
		s.t.Logf("missing on %s: %s", p, strings.Join(rs, " "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if offs, err := kadm.NewClient(s.dlqClient).FetchOffsets(ctx, s.group); err == nil {
		var committed []string
		offs.Each(func(o kadm.OffsetResponse) {
			committed = append(committed, fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, o.At))
		})
		sort.Strings(committed)
		s.t.Logf("committed offsets: %s", strings.Join(committed, " "))
	}
	s.mu.Lock()
	alive, _ := s.aliveLocked()
	s.mu.Unlock()
	for _, m := range alive {
		s.t.Logf("member %d: readyz %d, metrics: %s", m.id, readyz(m.health), strings.Join(scrapeLines(m.metrics,
			metrics.InFlight, metrics.Uncommitted, metrics.Buffered, metrics.PausedPartitions, metrics.StuckDeadLetters, metrics.ProduceErrorsTotal), "; "))
	}
}

// stopAll ends the churn and stops every live member with SIGTERM, then waits until the dead
// letter reader has read the whole topic (late duplicates included).
func (s *storm) stopAll() {
	s.t.Helper()
	s.stopChurn()
	s.mu.Lock()
	alive, _ := s.aliveLocked()
	var wg sync.WaitGroup
	var tookMu sync.Mutex
	var took []string
	for _, m := range alive {
		wg.Go(func() {
			at := time.Now()
			m.signalled = true
			_ = m.p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-m.p.done:
			case <-time.After(30 * time.Second):
				s.t.Errorf("member %d still running 30s after its final SIGTERM", m.id)
				_ = m.p.cmd.Process.Kill()
				<-m.p.done
			}
			if m.p.err != nil {
				s.t.Errorf("member %d exited with %v after its final SIGTERM", m.id, m.p.err)
			}
			tookMu.Lock()
			took = append(took, fmt.Sprintf("member %d %v", m.id, time.Since(at).Round(time.Millisecond)))
			tookMu.Unlock()
		})
	}
	wg.Wait()
	for _, m := range alive {
		m.p = nil
	}
	s.mu.Unlock()
	s.t.Logf("final stops: %s", strings.Join(took, ", "))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(s.dlqClient).ListEndOffsets(ctx, s.dlq)
	if err != nil {
		s.t.Fatalf("dead letter end offsets: %v", err)
	}
	var end int64
	ends.Each(func(o kadm.ListedOffset) { end += o.Offset })
	dt.Eventually(s.t, 10*time.Second, func() bool {
		s.dlqMu.Lock()
		defer s.dlqMu.Unlock()
		return s.dlqTotal >= end
	}, "the dead letter reader reads all %d dead letters", end)
}

// logCount counts the lines of every member's log that contain substr.
func (s *storm) logCount(substr string) int {
	n := 0
	for _, m := range s.members {
		f, err := os.Open(m.logPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), substr) {
				n++
			}
		}
		f.Close()
	}
	return n
}
