package leasestore

import "fmt"

// Validate reports whether st may be stored (Store.PutProviderState): a
// handle to continue, and Data within MaxProviderStateBytes. Both are
// ErrInvalidArgument. Backends call it before they write anything.
func (st ProviderState) Validate() error {
	switch {
	case st.Handle == "":
		return fmt.Errorf("%w: a provider state needs the handle it continues", ErrInvalidArgument)
	case len(st.Data) > MaxProviderStateBytes:
		return fmt.Errorf("%w: provider state of %d bytes exceeds the %d-byte limit (the session is not portable)",
			ErrInvalidArgument, len(st.Data), MaxProviderStateBytes)
	}
	return nil
}
