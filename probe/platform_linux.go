package probe

func platformTable(tokenVar string) Table { return &ProcFS{TokenVar: tokenVar} }
