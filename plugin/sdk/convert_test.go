package sdk

import (
	"reflect"
	"testing"
	"time"
)

// Every kind an agent can set reaches the protocol as a kind: an Update
// field added without its conversion would otherwise travel as an update
// without a kind, which the host refuses.
func TestUpdateToProtoConvertsEveryKind(t *testing.T) {
	ut := reflect.TypeOf(Update{})
	n := 0
	for i := range ut.NumField() {
		f := ut.Field(i)
		if !f.IsExported() || f.Type == reflect.TypeOf(time.Time{}) {
			continue
		}
		var u Update
		v := reflect.ValueOf(&u).Elem().Field(i)
		switch f.Type.Kind() {
		case reflect.Pointer:
			v.Set(reflect.New(f.Type.Elem()))
		case reflect.Slice:
			v.Set(reflect.MakeSlice(f.Type, 0, 0))
		default:
			t.Fatalf("Update.%s is a %s, neither a pointer nor a slice", f.Name, f.Type)
		}
		if u.kinds() != 1 {
			t.Errorf("Update.%s: kinds() = %d", f.Name, u.kinds())
		}
		if p := updateToProto(u); p.Kind == nil {
			t.Errorf("Update.%s converts to an update without a kind", f.Name)
		}
		n++
	}
	if n < 12 {
		t.Errorf("only %d kinds found", n)
	}
}
