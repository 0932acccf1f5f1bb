package etcdstore

import (
	"testing"
	"time"
)

// Valid counts the TTL on the boot clock too: a host whose monotonic clock
// stopped while the machine slept (the boot clock ran on) is not live on
// waking, though the monotonic until has not passed.
func TestValidUntilCountsSuspendedTime(t *testing.T) {
	const ttl = 10 * time.Second
	sent := time.Now()
	const sentBoot = int64(1_000 * time.Second)
	until, bootUntil := sent.Add(ttl), sentBoot+int64(ttl)

	// 2 s later on both clocks: no suspend, the monotonic until holds.
	now := sent.Add(2 * time.Second)
	if got := validUntil(until, bootUntil, now, sentBoot+int64(2*time.Second)); !got.Equal(until) {
		t.Errorf("without a suspend: until %v, want the monotonic %v", got, until)
	}
	// 2 s later on the monotonic clock, 62 s on the boot clock (a 60 s
	// suspend): the grant ended 52 s ago.
	got := validUntil(until, bootUntil, now, sentBoot+int64(62*time.Second))
	if want := now.Add(-52 * time.Second); !got.Equal(want) || got.After(now) {
		t.Errorf("after a 60 s suspend: until %v, want %v (past)", got, want)
	}
	// A 5 s suspend leaves 3 s of the 10.
	if got, want := validUntil(until, bootUntil, now, sentBoot+int64(7*time.Second)), now.Add(3*time.Second); !got.Equal(want) {
		t.Errorf("after a 5 s suspend: until %v, want %v", got, want)
	}
	// No boot clock at send or now, or not registered: until as it is.
	for _, c := range []struct {
		until          time.Time
		bootUntil, now int64
	}{{until, 0, sentBoot}, {until, bootUntil, 0}, {time.Time{}, bootUntil, sentBoot}} {
		if got := validUntil(c.until, c.bootUntil, now, c.now); !got.Equal(c.until) {
			t.Errorf("validUntil(%v, %d, now, %d) = %v, want %v", c.until, c.bootUntil, c.now, got, c.until)
		}
	}
}
