package metrics

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strconv"
	"sync"

	"svc/platform/db"
)

// RowCounter counts the rows an append-only table gains, by the value of
// one text column, reading only the rows added since its previous call: a
// counter for a table too big to count(*) at every scrape. The table needs
// a bigint identity primary key named id.
//
// Ids are drawn when a row is inserted, but rows become visible when their
// transaction commits, in another order: a row with a smaller id can appear
// after a larger one was read. So each call reads every row above a
// watermark (the rows of the last two calls or so, through the primary
// key), counts the ones it has not counted, and moves the watermark only up
// to ids whose transactions have all ended: the highest id a call saw is
// final once the oldest transaction still running (the snapshot's xmin) is
// newer than every transaction that was running at the *next* call. Waiting
// for the next call covers a transaction that had drawn its id but not yet
// its transaction id when a call ran (the two are microseconds apart inside
// one INSERT); only an insert stalled between them for a whole scrape
// interval could be missed. Rows that roll back leave gaps that are never
// counted.
//
// Counting starts at the first call: rows committed before it are not
// counted, except those whose ids are within Baseline of the highest id
// then and whose transactions had not committed yet.
type RowCounter struct {
	DB db.Querier
	// Table and Label are identifiers written in the code, never input.
	Table, Label string
	// Labels are counted from 0 before any row of theirs is seen, so that
	// their series exist (a rate over a series that appears at 1 misses
	// its first row).
	Labels []string
	// Batch bounds the new rows read by one call (default 100000); more
	// are read by the next calls.
	Batch int
	// Baseline is how far below the highest id at the first call late
	// commits are still counted (default 10000).
	Baseline int64

	mu      sync.Mutex
	started bool
	through int64              // every id <= through is counted or will never commit
	high    int64              // the highest id read
	seen    map[int64]struct{} // ids > through already read
	marks   []mark             // (high, xmax) of each call since through last moved
	counts  map[string]int64
}

type mark struct {
	high int64
	xmax uint64
}

// Count reads the rows added since the previous call and returns the
// counts by label since the first call.
func (c *RowCounter) Count(ctx context.Context) (map[string]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		var top int64
		if err := c.DB.QueryRowContext(ctx, fmt.Sprintf("SELECT coalesce(max(id), 0) FROM %s", c.Table)).Scan(&top); err != nil {
			return nil, fmt.Errorf("count %s: %w", c.Table, err)
		}
		// The rows up to top are read whole (they are the baseline, not
		// counted); those missing from them are watched for late commits.
		c.through, c.high = max(0, top-c.baseline()), top
		c.seen = map[int64]struct{}{}
		c.counts = map[string]int64{}
		for _, l := range c.Labels {
			c.counts[l] = 0
		}
		if err := c.read(ctx, false); err != nil {
			return nil, err
		}
		c.started = true
	} else if err := c.read(ctx, true); err != nil {
		return nil, err
	}
	return maps.Clone(c.counts), nil
}

func (c *RowCounter) baseline() int64 {
	if c.Baseline > 0 {
		return c.Baseline
	}
	return 10000
}

func (c *RowCounter) batch() int {
	if c.Batch > 0 {
		return c.Batch
	}
	return 100000
}

// read reads, in one statement and so one snapshot, the rows between the
// watermark and the highest id read (late commits) and the next batch of
// rows above it, and the snapshot's xmin and xmax.
func (c *RowCounter) read(ctx context.Context, count bool) error {
	q := fmt.Sprintf(`SELECT s.xmin, s.xmax, r.id, r.label
  FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, pg_snapshot_xmax(pg_current_snapshot())::text AS xmax) s
  LEFT JOIN LATERAL (
        (SELECT id, %[2]s AS label FROM %[1]s WHERE id > $1 AND id <= $2)
        UNION ALL
        (SELECT id, %[2]s AS label FROM %[1]s WHERE id > $2 ORDER BY id LIMIT $3)
  ) r ON true`, c.Table, c.Label)
	rows, err := c.DB.QueryContext(ctx, q, c.through, c.high, c.batch())
	if err != nil {
		return fmt.Errorf("count %s: %w", c.Table, err)
	}
	defer rows.Close()
	var (
		xminText, xmaxText string
		high               = c.high
	)
	for rows.Next() {
		var (
			id    sql.NullInt64
			label sql.NullString
		)
		if err := rows.Scan(&xminText, &xmaxText, &id, &label); err != nil {
			return fmt.Errorf("count %s: %w", c.Table, err)
		}
		if !id.Valid {
			continue
		}
		high = max(high, id.Int64)
		if _, ok := c.seen[id.Int64]; ok {
			continue
		}
		c.seen[id.Int64] = struct{}{}
		if count {
			c.counts[label.String]++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count %s: %w", c.Table, err)
	}
	xmin, err1 := strconv.ParseUint(xminText, 10, 64)
	xmax, err2 := strconv.ParseUint(xmaxText, 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("count %s: snapshot %q %q", c.Table, xminText, xmaxText)
	}
	c.high = high
	c.marks = append(c.marks, mark{high: high, xmax: xmax})
	// The latest mark whose running transactions have all ended makes every
	// mark before it final (see the type's doc).
	last := -1
	for i, m := range c.marks {
		if m.xmax <= xmin {
			last = i
		}
	}
	if last > 0 {
		c.through = c.marks[last-1].high
		c.marks = c.marks[last:]
		for id := range c.seen {
			if id <= c.through {
				delete(c.seen, id)
			}
		}
	}
	return nil
}
