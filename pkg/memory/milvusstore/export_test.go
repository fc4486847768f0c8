package milvusstore

// SetQueryWindow shrinks the page size of queries for a test and returns the restore func.
func SetQueryWindow(n int) func() {
	old := queryWindow
	queryWindow = n
	return func() { queryWindow = old }
}
