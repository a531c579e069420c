package event

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Backlog is the outbound events not delivered: what the operator watches
// (svc_events_pending, svc_events_dead and the oldest pending's age).
type Backlog struct {
	Pending, Dead int64
	// OldestPending is when the oldest pending event was created; nil when
	// none is pending.
	OldestPending *time.Time
	// EndpointPending and EndpointDead count the events' deliveries to
	// webhook endpoints in those states.
	EndpointPending, EndpointDead int64
}

// Backlog counts the pending and dead events, and the pending and dead
// endpoint deliveries. It reads only those, through the indexes on status:
// its cost follows the backlog, not the history of delivered events. The
// two counts are made independently: when one fails the other is still
// made and returned, with the error (both errors joined).
func (s *Service) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	evErr := s.DB.NewRaw(`SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       min(created_at) FILTER (WHERE status = 'pending') AS oldest_pending
  FROM outbound_events
 WHERE status IN ('pending', 'dead')`).Scan(ctx, &b.Pending, &b.Dead, &b.OldestPending)
	if evErr != nil {
		b.Pending, b.Dead, b.OldestPending = 0, 0, nil
		evErr = fmt.Errorf("event backlog: %w", evErr)
	}
	err := s.DB.NewRaw(`SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'dead') AS dead
  FROM public.webhook_deliveries
 WHERE status IN ('pending', 'dead')`).Scan(ctx, &b.EndpointPending, &b.EndpointDead)
	if err != nil {
		b.EndpointPending, b.EndpointDead = 0, 0
		err = fmt.Errorf("endpoint delivery backlog: %w", err)
	}
	return b, errors.Join(evErr, err)
}
