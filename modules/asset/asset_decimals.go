package asset

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// Decimals returns every asset's decimals by code, as the views that render
// amounts of several assets need them.
func Decimals(ctx context.Context, idb bun.IDB) (map[string]int, error) {
	all, err := (&Store{DB: idb}).All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read assets: %w", err)
	}
	out := make(map[string]int, len(all))
	for _, a := range all {
		out[a.Code] = a.Decimals
	}
	return out, nil
}
