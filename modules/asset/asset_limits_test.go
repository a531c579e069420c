package asset_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
)

// TestLimitsSet: every setting takes an integer in the smallest unit; the
// two optional ones also take off; anything else, or another name, is
// refused and changes nothing.
func TestLimitsSet(t *testing.T) {
	var l asset.Limits
	for i, name := range asset.LimitSettings {
		require.NoError(t, l.Set(name, "1000"), name)
		require.Equal(t, i >= 4, asset.OptionalSetting(name), name)
	}
	one := int64(1000)
	require.Equal(t, asset.Limits{Min: &one, AutoLimit: &one, DailyCap: &one, FlatFee: &one,
		UserDailyCap: &asset.Optional{Value: 1000}, FourEyesThreshold: &asset.Optional{Value: 1000}}, l)

	require.NoError(t, l.Set("withdrawal_four_eyes_threshold", "off"))
	require.Equal(t, &asset.Optional{Off: true}, l.FourEyesThreshold)
	before := l
	require.Error(t, l.Set("withdrawal_min", "off"), "a required setting cannot be turned off")
	require.ErrorContains(t, l.Set("withdrawal_min", "0.0002"), "smallest units")
	require.Error(t, l.Set("withdrawal_min", "-5"))
	require.ErrorContains(t, l.Set("withdrawal_max", "5"), "no withdrawal limit")
	require.Equal(t, before, l)
}
