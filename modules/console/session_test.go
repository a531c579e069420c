package console

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSessionEnds: a session ends after the idle timeout without use, and
// after MaxLifetime however much it is used; a used session lives on.
func TestSessionEnds(t *testing.T) {
	st := newStore()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	idle := 15 * time.Minute

	token := st.create(&session{Operator: "ada"}, now, idle)
	for k := range st.sessions {
		require.Equal(t, sha256.Sum256([]byte(token)), k, "the store keeps the token's SHA-256, not the token")
	}
	se, why := st.session(token, now.Add(idle-time.Second), idle)
	require.NotNil(t, se)
	require.Empty(t, why)
	se, why = st.session(token, now.Add(2*idle-2*time.Second), idle)
	require.NotNil(t, se, "each use restarts the idle time")
	se, why = st.session(token, now.Add(3*idle-2*time.Second), idle)
	require.Nil(t, se)
	require.Equal(t, "idle", why)
	se, _ = st.session(token, now.Add(3*idle-2*time.Second), idle)
	require.Nil(t, se, "an expired session is gone")

	token = st.create(&session{Operator: "ada"}, now, idle)
	at := now
	for at.Sub(now) < MaxLifetime-idle {
		at = at.Add(idle - time.Minute)
		se, why = st.session(token, at, idle)
		require.NotNil(t, se, "used at %s", at)
	}
	se, why = st.session(token, now.Add(MaxLifetime), idle)
	require.Nil(t, se)
	require.Equal(t, "lifetime", why)
}

// TestSignInChallengeIsTakenOnce: a sign-in's challenge is handed out
// once; the sign-ins held at once are bounded.
func TestSignInChallengeIsTakenOnce(t *testing.T) {
	st := newStore()
	now := time.Now()
	token, _ := st.startSignIn(now)
	require.True(t, st.setChallenge(token, &challenge{Session: "cs_x"}))
	require.NotNil(t, st.takeChallenge(token))
	require.Nil(t, st.takeChallenge(token))
	require.False(t, st.setChallenge("unknown", &challenge{}))

	st.maxSignIns = 50
	for range 55 {
		st.startSignIn(now)
	}
	require.Len(t, st.signIns, 50)
	require.Nil(t, st.signIn(token, now.Add(signInTTL)), "a sign-in is dropped after signInTTL")
}
