package bootclock

import (
	"runtime"
	"testing"
	"time"
)

// On Linux the boot clock is there and advances at least as fast as the
// monotonic clock (it is the monotonic clock plus time suspended).
func TestNowAdvances(t *testing.T) {
	a, ok := Now()
	if !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("no boot clock on Linux")
		}
		t.Skipf("no boot clock on %s", runtime.GOOS)
	}
	start := time.Now()
	time.Sleep(10 * time.Millisecond)
	elapsed := time.Since(start)
	b, _ := Now()
	if a <= 0 || time.Duration(b-a) < elapsed {
		t.Errorf("boot clock read %d then %d across %v of monotonic time", a, b, elapsed)
	}
}
