module attributes {tfm.plan = #tfm.plan<>} {}
