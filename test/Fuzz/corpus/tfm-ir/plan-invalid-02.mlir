module attributes {tfm.plan = #tfm.plan<etp = -1>} {}
