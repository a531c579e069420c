package db

// Page ends a keyset-paginated read that asked for limit+1 rows: it keeps
// the first limit and, when there was one more, returns the key of the
// last row kept, the cursor of the next page; the cursor is nil on the
// last page.
func Page[T, K any](rows []T, limit int, key func(T) K) ([]T, *K) {
	if len(rows) <= limit {
		return rows, nil
	}
	rows = rows[:limit]
	k := key(rows[len(rows)-1])
	return rows, &k
}
