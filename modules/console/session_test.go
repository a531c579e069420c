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

// TestMintedSecretSwept: a minted key's secret never read is dropped by
// the next mint after challengeTTL, not kept until its session reads the
// result page; one within challengeTTL is kept.
func TestMintedSecretSwept(t *testing.T) {
	m := &mintedStore{keys: map[string]mintedKey{}}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.put("s1", mintedKey{Secret: "svc_test_one"}, now)
	m.put("s2", mintedKey{Secret: "svc_test_two"}, now.Add(challengeTTL))
	require.Equal(t, 2, m.held(), "within challengeTTL both are kept")
	m.put("s3", mintedKey{Secret: "svc_test_three"}, now.Add(challengeTTL+time.Second))
	require.Equal(t, 2, m.held())
	_, ok := m.keys["s1"]
	require.False(t, ok, "the lapsed, unread secret is gone")
	require.Equal(t, "svc_test_three", m.take("s3", now.Add(challengeTTL+time.Second)).Secret)
}
