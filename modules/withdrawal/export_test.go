package withdrawal

import (
	"context"
	"time"
)

// HoldAutoPipelines takes every pipeline slot of s's one-round-trip
// creations (none may be in flight), so that the next ones wait. The
// function it returns waits until n creations wait, or two seconds, sends
// the ones waiting in one shared pipeline, and gives the slots back.
func HoldAutoPipelines(s *Service) (flush func(n int)) {
	bt := &s.batcher
	bt.mu.Lock()
	if bt.inFlight != 0 {
		bt.mu.Unlock()
		panic("HoldAutoPipelines: creations in flight")
	}
	bt.inFlight = autoInFlight
	bt.mu.Unlock()
	return func(n int) {
		deadline := time.Now().Add(2 * time.Second)
		for {
			bt.mu.Lock()
			if len(bt.waiting) >= n || time.Now().After(deadline) {
				break
			}
			bt.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
		items := bt.waiting
		bt.waiting = nil
		if len(items) == 0 {
			bt.inFlight = 0
			bt.mu.Unlock()
			return
		}
		bt.inFlight = 1 // the one runAuto runs on, and gives back
		bt.mu.Unlock()
		s.runAuto(context.Background(), items, false)
	}
}

// PayoutLive is the check a release makes at the processor (payoutLive).
func PayoutLive(ctx context.Context, s *Service, w Withdrawal) error { return s.payoutLive(ctx, w) }

// SubmitRow is the pass's submission of a withdrawal as it listed it
// (submitRow).
func SubmitRow(ctx context.Context, s *Service, w Withdrawal) error { return s.submitRow(ctx, w) }
